"""Exits non-zero unless every module in setup.py's COMPILED imports as a C extension here.

    python .ci/compiled_modules.py path/to/setup.py

Run by .ci/check-install with the new venv's Python, from outside the worktree (the worktree's
sources would be found first).
"""

import ast
import importlib.util
import sys


def compiled_modules(setup_py: str) -> list[str]:
    tree = ast.parse(open(setup_py).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COMPILED":
            return [path.removesuffix(".py").replace("/", ".") for path in ast.literal_eval(node.value)]
    raise SystemExit(f"{setup_py} has no COMPILED list")


def main() -> int:
    modules = compiled_modules(sys.argv[1])
    python = [name for name in modules if not importlib.util.find_spec(name).origin.endswith(".so")]
    print(f"check-install: {len(modules) - len(python)} of {len(modules)} modules are C extensions", file=sys.stderr)
    for name in python:
        print(f"check-install: {name} is pure Python", file=sys.stderr)
    return 1 if python else 0


if __name__ == "__main__":
    sys.exit(main())
