"""kcat (librdkafka 2.0, as Debian ships it) as a balanced consumer (-G group topic) against a
real broker process: it commits what it printed (librdkafka's auto-commit, and a last commit
when it closes), and the next kcat in the same group takes over exactly there."""

import shutil

import pytest

from tests.compat.group_support import (
    committed_offsets,
    create_topic,
    produce,
    value_of,
)
from tests.harness import run, unique_topic

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(
        shutil.which("kcat") is None, reason="kcat is not installed (.ci/setup test)"
    ),
]

TIMEOUT_S = 30
PARTITIONS = 2


def kcat_group(broker, group: str, topic: str, *options: str) -> list[tuple[int, int, bytes]]:
    """One kcat in the group until it exits (-e: at the end of its partitions, -c N: after N
    messages); returns the (partition, offset, value) it printed."""
    command = [
        "kcat",
        "-b",
        broker.bootstrap,
        "-q",
        "-G",
        group,
        "-X",
        "auto.offset.reset=earliest",
        "-X",
        "socket.timeout.ms=10000",
        "-f",
        "%p %o %s\\n",
        *options,
        topic,
    ]
    result = run(command, timeout=TIMEOUT_S)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    printed = []
    for line in result.stdout.splitlines():
        partition, offset, value = line.split(b" ", 2)
        printed.append((int(partition), int(offset), value))
    return printed


def at(offset: int) -> dict[int, int]:
    """The same offset for every partition."""
    return dict.fromkeys(range(PARTITIONS), offset)


def expected(starts: dict[int, int], ends: dict[int, int]) -> list[tuple[int, int, bytes]]:
    """The records from each partition's start to its end, sorted."""
    return [(p, o, value_of(p, o)) for p in sorted(starts) for o in range(starts[p], ends[p])]


def test_kcat_consumes_everything_commits_and_the_next_one_reads_only_new_messages(group_broker):
    topic, group = unique_topic("kcat-g"), unique_topic("kcat-group")
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    produce(group_broker.bootstrap, topic, PARTITIONS, 20)

    first = kcat_group(group_broker, group, topic, "-e")
    assert sorted(first) == expected(at(0), at(20))
    assert committed_offsets(group_broker.bootstrap, group, topic, PARTITIONS) == at(20)

    produce(group_broker.bootstrap, topic, PARTITIONS, 10, start=20)
    second = kcat_group(group_broker, group, topic, "-e")
    assert sorted(second) == expected(at(20), at(30))
    assert committed_offsets(group_broker.bootstrap, group, topic, PARTITIONS) == at(30)


def test_second_kcat_takes_over_where_the_first_stopped(group_broker):
    topic, group = unique_topic("kcat-t"), unique_topic("kcat-takeover")
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    produce(group_broker.bootstrap, topic, PARTITIONS, 20)

    first = kcat_group(group_broker, group, topic, "-c", "25")
    assert len(first) == 25
    # Exactly what it printed is committed: per partition, the offset after its last message.
    stopped_at = {
        p: max((o + 1 for q, o, _ in first if q == p), default=None) for p in range(PARTITIONS)
    }
    assert committed_offsets(group_broker.bootstrap, group, topic, PARTITIONS) == stopped_at

    second = kcat_group(group_broker, group, topic, "-e")
    starts = {p: offset or 0 for p, offset in stopped_at.items()}
    assert sorted(second) == expected(starts, at(20))
    assert sorted(first + second) == expected(at(0), at(20))
