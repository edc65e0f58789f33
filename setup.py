"""Builds logway; with LOGWAY_COMPILE=1, compiles the request path's modules to C with mypyc.

The modules in COMPILED are the ones every Produce and Fetch goes through (issue 19: their cost
is spread thin over the interpreter, so no one function is left to rewrite). mypyc compiles each
to a C extension from the same source, and the wheel holds both: Python imports the extension
when there is one, the `.py` otherwise, and the two behave alike (`.ci/check-install` runs the
unit and property tests against the compiled modules). Their module-level constants are declared
Final, which compiled code reads from a C static instead of the module's dict at each use
(tests/unit/test_compiled_modules.py).

Compiling is asked for, as mypy's own source build asks for MYPY_USE_MYPYC=1: it takes a minute
or two and needs gcc and Python's headers, so a plain `pip install .` stays quick and pure
Python. The Dockerfile and .ci/check-install set it. Even when asked, the modules stay pure
Python when
- the install is editable (`pip install -e .`, the tests' venv): an extension beside its source
  would be imported in place of that source after every later edit of it;
- mypyc cannot run or the C compiler fails (no gcc or Python headers on the machine): the build
  says so and carries on with the pure-Python modules alone.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = [
    "protocol/framing.py",
    "protocol/headers.py",
    "protocol/produce.py",
    "protocol/fetch.py",
    "protocol/record_batch.py",
    "storage/validation.py",
    "storage/pooled_file.py",
    "storage/records_file.py",
    "storage/index.py",
    "storage/segment.py",
    "storage/log.py",
    "storage/producer_state.py",
    "replication/partition.py",
    "broker/replica_manager.py",
    "broker/dispatch.py",
    "broker/network.py",
    "broker/handlers/produce.py",
    "broker/handlers/fetch.py",
    "broker/handlers/registry.py",
    "broker/handlers/authorization.py",
    "broker/security/quotas.py",
    "broker/metrics/stats.py",
    "protocol/primitives.py",
    "storage/leader_epoch.py",
    "broker/session.py",
    "broker/deferred.py",
    "broker/timeouts.py",
    "broker/fetch_sessions.py",
    "replication/fetch_session.py",
    "replication/fetcher.py",
]

# Type-check only what is compiled: the other modules are imported for their types alone.
MYPY_OPTIONS = ["--ignore-missing-imports", "--follow-imports=silent"]


def _say(message: str) -> None:
    print(f"logway setup.py: {message}", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that leaves the pure-Python modules in place when the compiler fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # CompileError, LinkError, a missing compiler: all the same here
            _say(f"the C compiler failed ({exc}); installing the pure-Python modules only")
            # The modules' extensions need the shared library of the group: none or all.
            for built in self.get_outputs():
                if os.path.exists(built):
                    os.remove(built)
            self.extensions = []
            self.distribution.ext_modules = []


def _extensions() -> list:
    if os.environ.get("LOGWAY_COMPILE") != "1":
        return []
    if any(command in sys.argv for command in ("egg_info", "dist_info", "sdist")):
        return []  # the package's metadata or sources only: nothing is built
    if "editable_wheel" in sys.argv:
        _say("editable install: pure-Python modules only")
        return []
    try:
        from mypyc.build import mypycify

        return mypycify(MYPY_OPTIONS + COMPILED, opt_level="3")
    except BaseException as exc:  # mypyc reports type errors with SystemExit
        _say(f"mypyc could not compile ({exc!r}); installing the pure-Python modules only")
        return []


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
