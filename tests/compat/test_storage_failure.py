"""Storage failures against a broker process: a log dir that fills up, and log dirs that cannot be
used at startup. The failed dir's partitions answer KAFKA_STORAGE_ERROR and show as offline in
Metadata; every other dir keeps serving; no acknowledged record is lost, including those of the
failed dir once it has room again.

A full disk is a small tmpfs mounted as one of two log dirs (JBOD). Mounting needs root (or
CAP_SYS_ADMIN), as tests run here and in CI; without it these tests skip and say why. Every mount
is undone in a finally.
"""

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from tests.compat.test_bad_input import (
    WireClient,
    batch_of,
    create_topic,
    fetch,
    metadata,
    produce,
    read_all,
)
from tests.harness import BrokerProcess

pytestmark = pytest.mark.compat

TMPFS_SIZE = "8m"
FILL_BATCH_BYTES = 200_000
MAX_FILL_PRODUCES = 200  # 8 MiB / 200 kB is about 42: the loop ends long before this bound


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def _mount(command: list[str], what: str) -> None:
    result = _run(command)
    if result.returncode != 0:
        pytest.skip(f"cannot mount {what} ({result.stderr.strip() or result.returncode}); needs root or CAP_SYS_ADMIN")


def _unmount(path: Path) -> None:
    if _run(["umount", str(path)]).returncode != 0:
        _run(["umount", "-l", str(path)])  # lazily, should anything still hold it


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _mount(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], "a tmpfs")
    try:
        yield path
    finally:
        _unmount(path)


@contextmanager
def read_only_bind(source: Path, target: Path) -> Iterator[Path]:
    source.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    _mount(["mount", "--bind", str(source), str(target)], "a bind mount")
    try:
        remount = _run(["mount", "-o", "remount,bind,ro", str(target)])
        if remount.returncode != 0:
            pytest.skip(f"cannot make a bind mount read-only ({remount.stderr.strip()})")
        yield target
    finally:
        _unmount(target)


@contextmanager
def running(broker: BrokerProcess) -> Iterator[BrokerProcess]:
    try:
        yield broker
    finally:
        broker.kill()


def fill_remaining_space(directory: Path) -> None:
    """Take whatever room is left (a few pages at most), so nothing more fits."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for _ in range(64 * 1024):  # bounded: at most 256 MiB of 4 KiB writes
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return
    finally:
        os.close(fd)
    raise AssertionError(f"{directory} never filled up")


def partition_in(directory: Path, topic: str, partitions: int) -> list[int]:
    return [p for p in range(partitions) if (directory / f"{topic}-{p}").is_dir()]


def describe_partitions(client: WireClient, topic: str) -> dict:
    (described,) = metadata(client, [topic]).topics
    assert described.error_code == ErrorCode.none, described
    return {p.partition_index: p for p in described.partitions}


def assert_offline(partition) -> None:
    """Metadata's view of a partition whose only replica's log dir failed."""
    assert partition.error_code == ErrorCode.leader_not_available
    assert partition.leader_id == -1
    assert partition.offline_replicas == (0,)
    assert partition.isr_nodes == ()


# ------------------------------------------------------------------------------ a full disk


def test_full_log_dir_fails_alone_and_its_records_survive(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with tmpfs(tmp_path / "small", TMPFS_SIZE) as small:
        broker = BrokerProcess(
            tmp_path / "broker",
            {
                "log.dirs": f"{small},{big}",
                # Segments roll on the way, so the failure may come from a roll as well.
                "log.segment.bytes": "1048576",
            },
        )
        with running(broker.start()):
            state = _fill_and_check(broker, small, big)

            # A restart while the dir is still full: it is offline from the start.
            fill_remaining_space(small)
            assert broker.stop() == 0
            broker.start()
            with WireClient(broker) as client:
                _check_after_failure(broker, client, state)
                assert f"log directory {small} is offline" in broker.log()
                assert "in no online log directory" in broker.log()
                # The failed dir's partition was not recreated empty in the good dir.
                assert not (big / f"{state.topic}-{state.failed}").exists()

            # Room again: the dir comes back with every record acknowledged before the failure.
            assert broker.stop() == 0
            (small / "filler").unlink()
            remount = _run(["mount", "-o", "remount,size=64m", str(small)])
            assert remount.returncode == 0, remount.stderr
            broker.start()
            with WireClient(broker) as client:
                partitions = describe_partitions(client, state.topic)
                assert partitions[state.failed].error_code == ErrorCode.none
                assert partitions[state.failed].leader_id == 0
                assert read_all(client, state.topic, state.failed) == state.failed_records
                assert read_all(client, state.topic, state.healthy) == state.healthy_records
                after = produce(client, state.topic, state.failed, batch_of(b"after recovery"))
                assert (after.error_code, after.base_offset) == (ErrorCode.none, len(state.failed_records))
            assert broker.stop() == 0
            assert "Traceback" not in broker.log(), broker.log()[-5000:]


@dataclass
class Jbod:
    """A topic with one partition on the tmpfs (`failed`) and one on the normal dir."""

    topic: str
    failed: int
    healthy: int
    failed_records: list = field(default_factory=list)
    healthy_records: list = field(default_factory=list)


def _fill_and_check(broker: BrokerProcess, small: Path, big: Path) -> Jbod:
    topic = f"jbod-{uuid.uuid4().hex[:8]}"
    with WireClient(broker) as client:
        assert create_topic(client, topic, 2) == ErrorCode.none
        # A new partition goes to the dir with fewest partitions: one each.
        (failed,) = partition_in(small, topic, 2)
        (healthy,) = partition_in(big, topic, 2)
        state = Jbod(topic, failed, healthy)

        # The known good state, on both dirs.
        for partition in (failed, healthy):
            answer = produce(client, topic, partition, batch_of(b"early %d" % partition, b"early again"))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
        healthy_records = read_all(client, topic, healthy)
        failed_records = read_all(client, topic, failed)
        assert len(healthy_records) == len(failed_records) == 2

        # Fill the tmpfs: every acknowledged batch is remembered, to read back later.
        storage_error = None
        for i in range(MAX_FILL_PRODUCES):
            value = b"%06d" % i + b"f" * FILL_BATCH_BYTES
            answer = produce(client, topic, failed, batch_of(value))
            if answer.error_code != ErrorCode.none:
                storage_error = answer
                break
            assert answer.base_offset == len(failed_records)
            failed_records.append((answer.base_offset, b"k", value))
        assert storage_error is not None, "the tmpfs never filled up"
        assert storage_error.error_code == ErrorCode.kafka_storage_error == 56
        assert "No space left on device" in (storage_error.error_message or "")
        assert len(failed_records) > 10  # the dir took data before it filled
        state.failed_records, state.healthy_records = failed_records, healthy_records
        assert f"log directory {small} is offline" in broker.log()

        _check_after_failure(broker, client, state)

        # New topics go to the dir that still works.
        other = f"after-{uuid.uuid4().hex[:8]}"
        assert create_topic(client, other, 2) == ErrorCode.none
        assert partition_in(big, other, 2) == [0, 1]
        for partition in (0, 1):
            answer = produce(client, other, partition, batch_of(b"placed well"))
            assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
            assert read_all(client, other, partition) == [(0, b"k", b"placed well")]
    return state


def _check_after_failure(broker: BrokerProcess, client: WireClient, state: Jbod) -> None:
    """The broker is up; the failed dir's partition is offline; the other dir serves."""
    assert broker.process.poll() is None
    topic, failed, healthy = state.topic, state.failed, state.healthy
    partitions = describe_partitions(client, topic)
    assert_offline(partitions[failed])
    assert partitions[healthy].error_code == ErrorCode.none
    assert partitions[healthy].leader_id == 0

    assert produce(client, topic, failed, batch_of(b"refused")).error_code == ErrorCode.kafka_storage_error
    assert fetch(client, topic, failed, 0).error_code == ErrorCode.kafka_storage_error

    # The other dir: its earlier records read back, and it keeps taking produces.
    assert read_all(client, topic, healthy) == state.healthy_records
    value = b"still served %d" % len(state.healthy_records)
    answer = produce(client, topic, healthy, batch_of(value))
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, len(state.healthy_records))
    state.healthy_records.append((answer.base_offset, b"k", value))
    assert read_all(client, topic, healthy) == state.healthy_records


# ----------------------------------------------------------------- unusable dirs at startup


def _regular_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "not-a-directory"
    path.write_text("a log dir cannot be a file\n")
    yield path


def _read_only_mount(tmp_path: Path) -> Iterator[Path]:
    with read_only_bind(tmp_path / "ro-source", tmp_path / "read-only") as path:
        yield path


UNUSABLE = {"regular-file": _regular_file, "read-only-mount": _read_only_mount}


@pytest.mark.parametrize("kind", sorted(UNUSABLE))
def test_unusable_log_dir_at_startup_leaves_the_others_serving(tmp_path, kind):
    good = tmp_path / "good"
    with contextmanager(UNUSABLE[kind])(tmp_path) as bad:
        broker = BrokerProcess(tmp_path / "broker", {"log.dirs": f"{bad},{good}"})
        with running(broker.start()):
            assert f"log directory {bad} is offline" in broker.log()
            topic = f"startup-{uuid.uuid4().hex[:8]}"
            with WireClient(broker) as client:
                assert create_topic(client, topic, 3) == ErrorCode.none
                assert partition_in(good, topic, 3) == [0, 1, 2]
                for partition in range(3):
                    answer = produce(client, topic, partition, batch_of(b"on the good dir"))
                    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
                partitions = describe_partitions(client, topic)
                assert all(p.error_code == ErrorCode.none for p in partitions.values())

            # And again after a restart, with the records intact.
            assert broker.stop() == 0
            broker.start()
            with WireClient(broker) as client:
                for partition in range(3):
                    assert read_all(client, topic, partition) == [(0, b"k", b"on the good dir")]
            assert broker.stop() == 0
            assert "Traceback" not in broker.log(), broker.log()[-5000:]
        if kind == "read-only-mount":
            assert os.listdir(bad) == []  # nothing was written through the read-only mount


def test_no_usable_log_dir_exits_with_a_clear_error(tmp_path):
    first, second = tmp_path / "file-1", tmp_path / "file-2"
    first.write_text("x")
    second.write_text("y")
    broker = BrokerProcess(tmp_path / "broker", {"log.dirs": f"{first},{second}"})
    with running(broker):
        with pytest.raises(RuntimeError, match="broker exited with 1"):
            broker.start()
    log = broker.log()
    assert "logway: cannot start: no log directory could store the cluster metadata" in log
    assert "Traceback" not in log, log
