"""What setup.py's COMPILED modules keep to, so that compiled code stays native.

- Module-level constants are Final. Compiled code reads a Final name from a C static (or
  inlines a literal), and any other module global from the module's dict at every use: about
  5 % of a 16 KiB Produce's instructions went to those lookups (benchmarks/RESULTS.md). Type
  aliases and `__all__` cannot be Final.
- Dataclasses write their own __init__ (`init=False`). Compiled code calls it directly; the one
  @dataclass generates is an interpreted function, called through the type with an argument
  tuple and a keyword dict, about four times the cost (RESULTS.md). Frozen ones, built once
  from the configuration, are left to @dataclass: a hand-written frozen __init__ cannot assign.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Type aliases and type variables: names for the type checker, which Final would not fit.
TYPE_ALIASES = {
    "Dispatch", "LeadershipCallback", "RemoteAuxStateSource", "Handle", "Parse", "Name", "Clock", "T", "ReplicaQuota",
    "ClientFactory",
}


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


def _dataclasses_with_a_generated_init(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            name = ast.unparse(call.func if call else decorator)
            if name not in ("dataclass", "dataclasses.dataclass"):
                continue
            options = {k.arg: ast.literal_eval(k.value) for k in call.keywords} if call else {}
            if options.get("frozen"):
                continue
            writes_init = any(isinstance(item, ast.FunctionDef) and item.name == "__init__" for item in node.body)
            if options.get("init", True) or not writes_init:
                found.append(node.name)
    return found


def test_every_dataclass_a_compiled_module_builds_writes_its_own_init():
    modules = _compiled_modules()

    assert {
        module: names for module in modules if (names := _dataclasses_with_a_generated_init(ROOT / module))
    } == {}
