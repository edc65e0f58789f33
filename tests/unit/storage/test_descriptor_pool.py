"""The pool's second-chance order: which file lets go of its descriptor, and a use that takes no
lock. Files are RecordsFiles, the pool's commonest kind (tests/unit/storage/test_records_file.py
has the bound and the reopening)."""

import gc
import threading

import pytest

from storage import descriptor_pool
from storage.records_file import RecordsFile


@pytest.fixture
def files(tmp_path):
    # The pool is the process's: a file of an earlier test in this worker, dead in a reference
    # cycle but not yet collected, keeps its place in the order, and a used one is passed over
    # like a live one (CI at 3f5aefb: the second-chance test's newest file went out first).
    # Collected first; any file still alive is then left at most one place.
    gc.collect()
    descriptor_pool.set_capacity(1)
    opened = []

    def open_file(name: str) -> RecordsFile:
        opened.append(RecordsFile.open(str(tmp_path / f"{name}.log")))
        return opened[-1]

    yield open_file
    for file in opened:
        file.close()
    descriptor_pool.fit_to_open_files_limit()


def test_a_file_used_since_it_opened_gets_a_second_chance_and_an_unused_one_lets_go(files):
    descriptor_pool.set_capacity(3)
    oldest, middle, newest = files("oldest"), files("middle"), files("newest")
    oldest.append(b"a")

    files("fourth")  # passes over the marked oldest, lets go of middle

    assert oldest.holds_descriptor and newest.holds_descriptor
    assert not middle.holds_descriptor


def test_a_second_chance_is_spent_by_one_pass(files):
    descriptor_pool.set_capacity(2)
    first, second = files("first"), files("second")
    first.append(b"a")
    files("third")  # passes over first, which loses its mark and goes to the back; second lets go
    assert first.holds_descriptor and not second.holds_descriptor

    files("fourth")  # third lets go: first is behind it now
    files("fifth")  # first, unused since its pass, lets go

    assert not first.holds_descriptor


def test_a_file_just_opened_is_not_the_one_its_opening_lets_go(files):
    descriptor_pool.set_capacity(1)
    used = files("used")
    used.append(b"a")

    opened = files("opened")

    assert opened.holds_descriptor and not used.holds_descriptor


def test_a_file_holding_its_descriptor_is_used_without_the_pools_lock(files):
    file = files("0")
    file.append(b"a")
    appended = threading.Event()

    def append_while_the_lock_is_held() -> None:
        file.append(b"b")
        appended.set()

    with descriptor_pool.lock():  # as a rename in another thread would hold it
        writer = threading.Thread(target=append_while_the_lock_is_held, daemon=True)
        writer.start()
        assert appended.wait(timeout=5)
    writer.join()
    assert file.read(0, 2) == b"ab"
