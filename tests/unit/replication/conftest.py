"""Fixtures shared with the storage tests."""

from tests.unit.storage.conftest import open_log  # noqa: F401  (a fixture: opens a real partition log)
