"""broker.admin.cli: what the tool's start-up loads."""

import subprocess
import sys


def test_the_tool_starts_without_the_libraries_only_tls_http_tiered_storage_or_old_versions_need():
    # A fresh interpreter, since this test process has imported everything already. Each is a
    # tenth or more of the tool's start-up, paid by every command an operator or script runs.
    script = (
        "import sys, broker.admin.cli; "
        "print(' '.join(m for m in ('aiohttp', 'cryptography', 'fsspec', 'protocol.legacy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)

    assert done.stdout.split() == []
