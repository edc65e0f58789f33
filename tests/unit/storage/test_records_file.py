import errno
import os

import pytest

from storage import descriptor_pool
from storage.records_file import RecordsFile


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def at_most():
    """Bound the process's open records files for one test, then size the pool as before."""

    def set_bound(capacity: int) -> None:
        descriptor_pool.set_capacity(capacity)

    yield set_bound
    descriptor_pool.fit_to_open_files_limit()


def test_files_past_the_bound_let_go_of_their_descriptors_and_reopen_when_used(tmp_path, at_most):
    at_most(4)
    before = open_descriptors()
    files = [RecordsFile.open(str(tmp_path / f"{n}.log")) for n in range(20)]
    for n, file in enumerate(files):
        file.append(b"file %d" % n)

    assert open_descriptors() - before <= 4
    assert [file.read(0, file.size) for file in files] == [b"file %d" % n for n in range(20)]
    assert open_descriptors() - before <= 4
    for file in files:
        file.close()


def test_the_most_recently_used_files_keep_their_descriptors(tmp_path, at_most):
    at_most(2)
    first, second, third = (RecordsFile.open(str(tmp_path / f"{n}.log")) for n in range(3))
    first.append(b"a")  # first is now the most recent, second the least

    assert first.holds_descriptor and third.holds_descriptor
    assert not second.holds_descriptor
    for file in (first, second, third):
        file.close()


def test_a_region_keeps_its_descriptor_after_the_pool_and_the_file_let_go(tmp_path, at_most):
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"0123456789")
    region = records.region(2, 5)
    RecordsFile.open(str(tmp_path / "1.log")).close()  # takes the only place in the pool
    records.close()
    os.unlink(tmp_path / "0.log")

    assert not records.holds_descriptor
    assert region.read() == b"23456"
    os.fstat(region.fd)  # still open


def test_a_renamed_file_reopens_by_its_new_path(tmp_path, at_most):
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"abc")
    records.rename(str(tmp_path / "0.log.deleted"))
    other = RecordsFile.open(str(tmp_path / "1.log"))

    assert not records.holds_descriptor
    assert records.read(0, 3) == b"abc"
    records.close()
    other.close()


def test_a_closed_file_refuses_reads_and_writes(tmp_path):
    records = RecordsFile.open(str(tmp_path / "0.log"))
    records.append(b"abc")
    records.close()

    for use in (lambda: records.read(0, 3), lambda: records.append(b"d"), records.flush):
        with pytest.raises(OSError) as raised:
            use()
        assert raised.value.errno == errno.EBADF


def test_a_read_only_file_is_not_created_and_reopens_read_only(tmp_path, at_most):
    with pytest.raises(FileNotFoundError):
        RecordsFile.open(str(tmp_path / "missing.log"), read_only=True)
    (tmp_path / "0.log").write_bytes(b"xyz")
    os.chmod(tmp_path / "0.log", 0o444)
    at_most(1)
    records = RecordsFile.open(str(tmp_path / "0.log"), read_only=True)
    RecordsFile.open(str(tmp_path / "1.log")).close()

    assert records.read(0, 3) == b"xyz"
    records.close()
