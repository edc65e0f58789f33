"""setup.py's COMPILED modules declare their module-level constants Final.

Compiled code reads a Final name from a C static (or inlines a literal), and any other module
global from the module's dict at every use: about 5 % of a 16 KiB Produce's instructions went to
those lookups (benchmarks/RESULTS.md). Type aliases and `__all__` cannot be Final.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TYPE_ALIASES = {"Dispatch", "LeadershipCallback", "RemoteAuxStateSource", "Handle", "Parse", "Name", "Clock"}


def _compiled_modules() -> list[str]:
    setup = (ROOT / "setup.py").read_text()
    listing = setup.split("COMPILED = [", 1)[1].split("]", 1)[0]
    return re.findall(r'"([^"]+\.py)"', listing)


def _globals_not_final(path: Path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            found += [t.id for t in node.targets if isinstance(t, ast.Name) and t.id not in TYPE_ALIASES | {"__all__"}]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if "Final" not in ast.unparse(node.annotation):
                found.append(node.target.id)
    return found


def test_every_module_level_name_a_compiled_module_assigns_is_final():
    modules = _compiled_modules()
    assert len(modules) >= 20  # the listing was found

    assert {module: names for module in modules if (names := _globals_not_final(ROOT / module))} == {}
