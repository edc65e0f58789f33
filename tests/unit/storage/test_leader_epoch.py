import os

import pytest

from storage.checkpoint import CorruptCheckpointError
from storage.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)
from storage.log_config import LogConfig
from tests.unit.storage.conftest import batch

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache(*entries: tuple[int, int], path: str = "unused") -> LeaderEpochCache:
    return LeaderEpochCache(path, [EpochEntry(*e) for e in entries])


def test_assign_adds_new_epochs_and_ignores_repeats_and_undefined():
    epochs = cache()
    assert epochs.assign(0, 0)
    assert not epochs.assign(0, 5)
    assert not epochs.assign(-1, 7)
    assert epochs.assign(2, 10)
    assert epochs.entries == ((0, 0), (2, 10))
    assert epochs.latest_epoch == 2


def test_assign_drops_entries_it_conflicts_with():
    epochs = cache((0, 0), (2, 10), (4, 20))
    assert epochs.assign(3, 15)  # epoch 4 is later
    assert epochs.entries == ((0, 0), (2, 10), (3, 15))
    assert epochs.assign(5, 12)  # epoch 3 starts after 12
    assert epochs.entries == ((0, 0), (2, 10), (5, 12))


@pytest.mark.parametrize(
    "requested, expected",
    [
        (UNDEFINED_EPOCH, UNDEFINED),
        (0, (0, 10)),
        (1, (0, 10)),  # an epoch this log never had ends where the next one starts
        (2, (2, 20)),
        (3, (2, 20)),
        (4, (4, 25)),  # the latest epoch ends at the log end
        (5, UNDEFINED),
    ],
)
def test_end_offset_for_follows_kafka(requested, expected):
    assert cache((0, 0), (2, 10), (4, 20)).end_offset_for(requested, 25) == expected


def test_end_offset_for_below_every_epoch_answers_the_first_start():
    epochs = cache((3, 7), (5, 9))
    assert epochs.end_offset_for(1, 12) == (1, 7)
    assert cache().end_offset_for(1, 12) == UNDEFINED


def test_epoch_for_offset():
    epochs = cache((0, 0), (2, 10))
    assert [epochs.epoch_for_offset(o) for o in (0, 9, 10, 99)] == [0, 0, 2, 2]
    assert cache((1, 5)).epoch_for_offset(4) == UNDEFINED_EPOCH


def test_truncate_from_end_and_start():
    epochs = cache((0, 0), (2, 10), (4, 20))
    assert not epochs.truncate_from_end(21)
    assert epochs.truncate_from_end(20)
    assert epochs.entries == ((0, 0), (2, 10))
    assert epochs.truncate_from_start(12)
    assert epochs.entries == ((2, 12),)
    assert not epochs.truncate_from_start(12)
    assert not epochs.truncate_from_start(5)


def test_the_file_is_kafkas_format_and_reads_back(tmp_path):
    path = str(tmp_path / LEADER_EPOCH_CHECKPOINT)
    cache((0, 0), (3, 17), path=path).write()
    assert open(path).read() == "0\n2\n0 0\n3 17\n"
    assert LeaderEpochCache.read(path).entries == ((0, 0), (3, 17))
    assert LeaderEpochCache.read(str(tmp_path / "missing")) is None
    with open(path, "w") as f:
        f.write("0\n3\n0 0\n")
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCache.read(path)


# ------------------------------------------------------------------------- in the log


def append(log, epoch: int, *values: bytes) -> None:
    log.append_as_leader(memoryview(batch(*values)), leader_epoch=epoch)


def test_leader_appends_record_new_epochs_in_the_file(open_log):
    log = open_log()
    append(log, 0, b"a", b"b")
    append(log, 0, b"c")
    append(log, 3, b"d")
    assert log.leader_epochs.entries == ((0, 0), (3, 3))
    assert open(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)).read() == "0\n2\n0 0\n3 3\n"


def test_a_missing_file_is_rebuilt_from_the_batches(open_log):
    log = open_log(LogConfig(segment_bytes=200))
    for epoch in (0, 0, 1, 1, 4, 4):
        append(log, epoch, b"v" * 50)
    assert len(log.segments) > 2
    log.close()
    os.unlink(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT))
    reloaded = open_log(LogConfig(segment_bytes=200))
    assert reloaded.leader_epochs.entries == ((0, 0), (1, 2), (4, 4))
    assert os.path.exists(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT))


def test_recovery_adds_the_epochs_of_batches_the_file_missed(open_log):
    log = open_log()
    append(log, 0, b"a")
    append(log, 2, b"b")
    log.close()
    path = os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)
    cache((0, 0), path=path).write()  # the crash came before the file caught up
    reloaded = open_log(had_clean_shutdown=False)
    assert reloaded.leader_epochs.entries == ((0, 0), (2, 1))


def test_entries_beyond_the_log_end_are_dropped_at_load(open_log):
    log = open_log()
    append(log, 0, b"a")
    log.close()
    cache((0, 0), (5, 1), path=os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)).write()
    assert open_log().leader_epochs.entries == ((0, 0),)
