"""What the KafkaJS compat tests share: where their Node.js scripts live, and the marks that skip
them with the reason when Node.js or the kafkajs package is missing."""

import shutil
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"

KAFKAJS_MARKS = [
    pytest.mark.compat,
    pytest.mark.skipif(
        shutil.which("node") is None, reason="node is not installed (.ci/setup test)"
    ),
    pytest.mark.skipif(
        not (JS_DIR / "node_modules" / "kafkajs").is_dir(),
        reason="kafkajs is not installed: npm ci --prefix tests/compat/js (.ci/setup test does it)",
    ),
]
