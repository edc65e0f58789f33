"""Fixtures of the compat tests."""

import pytest

from tests.compat.group_support import assert_clean_log, start_group_broker


@pytest.fixture(scope="module")
def group_broker(request, tmp_path_factory):
    """A broker tuned for quick rebalances (group_support), one per test module, whose log must
    hold no error when the module is done."""
    broker = start_group_broker(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "data")
    yield broker
    broker.kill()
    assert_clean_log(broker)
