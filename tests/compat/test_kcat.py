"""kcat (librdkafka 2.0, as Debian ships it) against a real broker process: metadata listing,
producing with keys, headers and every codec, consuming with format strings and JSON, offsets by
timestamp."""

import json
import shutil
import time

import pytest

from tests.harness import run, unique_topic

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(
        shutil.which("kcat") is None, reason="kcat is not installed (.ci/setup test)"
    ),
]

TIMEOUT_S = 30
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(broker, *args: str, stdin: bytes | None = None) -> str:
    """Run kcat against `broker`; fail the test on a non-zero exit. Returns stdout."""
    command = [
        "kcat",
        "-b",
        broker.bootstrap,
        "-q",
        "-X",
        "socket.timeout.ms=10000",
        "-X",
        "message.timeout.ms=20000",
        *args,
    ]
    result = run(command, timeout=TIMEOUT_S, input=stdin)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout.decode()


def produce(broker, topic: str, lines: list[str], *options: str) -> None:
    kcat(broker, "-P", "-t", topic, *options, stdin="".join(line + "\n" for line in lines).encode())


def consume_json(broker, topic: str, *options: str) -> list[dict]:
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-J", *options)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def create_topic(broker, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=TIMEOUT_S)


def test_metadata_lists_broker_topic_and_partitions(shared_broker):
    topic = unique_topic("meta")
    create_topic(shared_broker, topic, 3)

    metadata = json.loads(kcat(shared_broker, "-L", "-J", "-t", topic))
    assert metadata["controllerid"] == 0
    assert metadata["brokers"] == [{"id": 0, "name": shared_broker.bootstrap}]
    [described] = metadata["topics"]
    assert described["topic"] == topic
    assert "error" not in described
    partitions = sorted(described["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p["leader"] == 0
        assert p["replicas"] == [{"id": 0}] and p["isrs"] == [{"id": 0}]

    # The plain-text listing of every topic mentions it too.
    listing = kcat(shared_broker, "-L")
    assert f'topic "{topic}" with 3 partitions' in listing
    assert f"broker 0 at {shared_broker.bootstrap}" in listing


@pytest.mark.parametrize("codec", CODECS)
def test_produce_with_keys_headers_and_codec_then_consume_formatted(shared_broker, codec):
    topic = unique_topic(f"z-{codec}")
    lines = [f"key-{i}:value-{i}-{'x' * (i % 13)}" for i in range(300)]
    produce(
        shared_broker,
        topic,
        lines,
        "-K",
        ":",
        "-z",
        codec,
        "-H",
        "source=kcat",
        "-H",
        f"codec={codec}",
    )

    out = kcat(
        shared_broker,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-f",
        "%t|%p|%o|%k|%s|%h\n",
    )
    rows = [line.split("|") for line in out.splitlines()]
    assert len(rows) == len(lines)
    for offset, (row, line) in enumerate(zip(rows, lines)):
        key, value = line.split(":", 1)
        assert row == [topic, "0", str(offset), key, value, f"source=kcat,codec={codec}"]


def test_null_values_and_keys(shared_broker):
    topic = unique_topic("null")
    produce(shared_broker, topic, ["k1:", "k2:v2", ":v3"], "-K", ":", "-Z")
    messages = consume_json(shared_broker, topic)
    assert [(m["offset"], m["key"], m["payload"]) for m in messages] == [
        (0, "k1", None),
        (1, "k2", "v2"),
        (2, None, "v3"),
    ]
    out = kcat(shared_broker, "-C", "-t", topic, "-o", "beginning", "-e", "-Z", "-f", "%o:%K:%S\n")
    assert out.splitlines() == ["0:2:-1", "1:2:2", "2:-1:2"]


def test_partitions_offsets_and_counts(shared_broker):
    topic = unique_topic("parts")
    create_topic(shared_broker, topic, 2)
    produce(shared_broker, topic, [f"p0-{i}" for i in range(10)], "-p", "0")
    produce(shared_broker, topic, [f"p1-{i}" for i in range(5)], "-p", "1", "-z", "gzip")

    # An absolute start offset and a message count.
    out = kcat(shared_broker, "-C", "-t", topic, "-p", "0", "-o", "3", "-c", "4", "-f", "%o=%s\n")
    assert out.splitlines() == [f"{i}=p0-{i}" for i in range(3, 7)]
    # A start relative to the end.
    out = kcat(shared_broker, "-C", "-t", topic, "-p", "1", "-o", "-2", "-e", "-f", "%o=%s\n")
    assert out.splitlines() == ["3=p1-3", "4=p1-4"]
    # Both partitions, JSON output.
    messages = consume_json(shared_broker, topic)
    by_partition = {0: [], 1: []}
    for m in messages:
        by_partition[m["partition"]].append((m["offset"], m["payload"]))
    assert by_partition[0] == [(i, f"p0-{i}") for i in range(10)]
    assert by_partition[1] == [(i, f"p1-{i}") for i in range(5)]


def test_offsets_by_timestamp(shared_broker):
    topic = unique_topic("ts")
    produce(shared_broker, topic, [f"early-{i}" for i in range(5)])
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    produce(shared_broker, topic, [f"late-{i}" for i in range(3)])
    time.sleep(0.05)
    after_everything = int(time.time() * 1000)

    # Consume from the first record at or after the boundary.
    out = kcat(shared_broker, "-C", "-t", topic, "-o", f"s@{boundary}", "-e", "-f", "%o=%s\n")
    assert out.splitlines() == [f"{5 + i}=late-{i}" for i in range(3)]

    # ...and up to (excluding) a stop timestamp.
    out = kcat(
        shared_broker, "-C", "-t", topic, "-o", "s@0", "-o", f"e@{boundary}", "-e", "-f", "%o\n"
    )
    assert out.splitlines() == [str(i) for i in range(5)]

    # Query mode: the offset for a timestamp.
    out = kcat(shared_broker, "-Q", "-t", f"{topic}:0:{boundary}")
    assert f"{topic} [0] offset 5" in out
    out = kcat(shared_broker, "-Q", "-t", f"{topic}:0:{after_everything}")
    assert f"{topic} [0] offset -1" in out

    # Timestamps come back as they were stamped: early ones before the boundary, late ones after.
    messages = consume_json(shared_broker, topic)
    assert all(m["tstype"] == "create" for m in messages)
    assert all(m["ts"] < boundary for m in messages[:5])
    assert all(boundary <= m["ts"] < after_everything for m in messages[5:])
