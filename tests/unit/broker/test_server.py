import resource
import subprocess
import sys

_SCRIPT = """
import logging, resource
logging.basicConfig(level=logging.INFO, format="%(message)s")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
from broker.server import raise_open_files_limit
from storage import descriptor_pool
raise_open_files_limit()
print(resource.getrlimit(resource.RLIMIT_NOFILE), descriptor_pool.capacity())
"""


def test_start_raises_the_soft_open_files_limit_to_the_hard_one_and_logs_both():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True)

    assert done.stdout.split("\n")[0] == f"({hard}, {hard}) {max(64, hard // 2)}"
    assert f"soft {hard} (was 256), hard {hard}" in done.stderr
