"""pyproject.toml declares what the code imports: a plain `pip install .` (no extras) gives a broker
that starts, the `spark` extra gives everything spark_jobs/ imports and the `mirror` extra
everything logway-mirror (replication/mirror/) imports.

A package that only the tests install (kazoo once was one) goes unnoticed by every test run in the
test venv, so imports are read from the source with `ast`, and mapped to distributions through
importlib.metadata.packages_distributions() of the venv running the tests. The one exception:
a module pyproject registers as a pytest plugin (`pytest11`, broker/testing.py) may import pytest,
since only pytest loads it as one.
"""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = ("broker", "protocol", "storage", "replication", "coordinator")
OWN_PACKAGES = {*RUNTIME_PACKAGES, "spark_jobs"}
MIRROR = "replication/mirror"  # the logway-mirror process, not the broker: its own extra


def _normalized(distribution: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _requirement_name(requirement: str) -> str:
    return _normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group())


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]


def _pytest_plugin_files() -> set[Path]:
    plugins = _project().get("entry-points", {}).get("pytest11", {}).values()
    return {ROOT / (module.replace(".", "/") + ".py") for module in plugins}


def _third_party_imports(package: str) -> dict[str, str]:
    """Each top-level name imported from outside the standard library and logway, with one file
    that imports it (pytest not counted in pytest plugins); the mirror's files only when
    `package` is the mirror's own directory."""
    found: dict[str, str] = {}
    plugins = _pytest_plugin_files()
    for path in sorted((ROOT / package).rglob("*.py")):
        if package != MIRROR and path.is_relative_to(ROOT / MIRROR):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top == "pytest" and path in plugins:
                    continue
                if top not in sys.stdlib_module_names and top not in OWN_PACKAGES:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _undeclared(packages: tuple[str, ...], requirements: list[str]) -> list[str]:
    declared = {_requirement_name(requirement) for requirement in requirements}
    distributions = packages_distributions()
    missing = []
    for package in packages:
        for name, path in _third_party_imports(package).items():
            providers = {_normalized(d) for d in distributions.get(name, ())}
            if not providers & declared:
                missing.append(f"{name} (imported by {path}; installed from {sorted(providers) or 'nothing'})")
    return missing


def test_every_package_the_broker_imports_is_a_runtime_dependency():
    assert _undeclared(RUNTIME_PACKAGES, _project()["dependencies"]) == []


def test_every_package_spark_jobs_imports_is_in_the_spark_extra_or_the_runtime_dependencies():
    project = _project()
    requirements = project["dependencies"] + project["optional-dependencies"]["spark"]
    assert _undeclared(("spark_jobs",), requirements) == []



def test_every_package_the_mirror_imports_is_in_the_mirror_extra_or_the_runtime_dependencies():
    project = _project()
    requirements = project["dependencies"] + project["optional-dependencies"]["mirror"]
    assert _undeclared((MIRROR,), requirements) == []
