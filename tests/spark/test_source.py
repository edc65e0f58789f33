"""The "logway" data source in local Spark against a broker process: exact rows, offset ranges,
headers, every codec, a compacted topic with offset gaps, a partition split into several Spark
partitions, offline reads from log dirs (broker up, broker down, JBOD, torn tail), data loss,
LogAppendTime, writes, and a stream."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch

from tests.harness import BrokerProcess, unique_topic
from tests.spark.helpers import SPARK_MARKS, TIMEOUT_S, create_topic, produce, rows_of, wait_for

pytestmark = SPARK_MARKS

T0 = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def read(spark, bootstrap: str | None = None, **options):
    reader = spark.read.format("logway")
    if bootstrap:
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def make_records(count: int, first: int = 0) -> list[dict]:
    """Keys (some null), values (some empty, some null), headers (none, one, several with a
    null value and a repeated key) and increasing timestamps."""
    records = []
    for i in range(first, first + count):
        record = {
            "key": None if i % 50 == 7 else b"key-%d" % (i % 37),
            "value": None if i % 71 == 5 else (b"" if i % 29 == 3 else b"value-%d-" % i + bytes([i % 256]) * (i % 40)),
            "timestamp": T0 + 10 * i,
        }
        if i % 3 == 1:
            record["headers"] = [("a", b"1")]
        elif i % 3 == 2:
            record["headers"] = [("a", b"x"), ("n", None), ("a", b"dup-%d" % i)]
        records.append(record)
    return records


def expected_rows(delivered: list[dict], headers: bool = True, timestamp_type: int = 0) -> dict:
    rows = {}
    for d in delivered:
        row = (d.get("key"), d.get("value"), d["timestamp"], timestamp_type)
        if headers:
            row += (list(d.get("headers") or []),)
        rows[(d["partition"], d["offset"])] = row
    return rows


@pytest.fixture(scope="module")
def events(spark_broker):
    topic = create_topic(spark_broker.bootstrap, unique_topic("events"), 3)
    delivered = produce(spark_broker.bootstrap, topic, make_records(300))
    assert {d["partition"] for d in delivered} == {0, 1, 2}
    return topic, delivered


def test_every_record_exactly_once_with_headers(spark, spark_broker, events):
    topic, delivered = events
    df = read(spark, spark_broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"
    ]
    assert df.rdd.getNumPartitions() == 3
    assert rows_of(df, headers=True) == expected_rows(delivered)
    assert {r["topic"] for r in df.select("topic").distinct().collect()} == {topic}


def test_schema_is_that_of_sparks_kafka_source(spark, spark_broker, events):
    topic, _ = events
    df = read(spark, spark_broker.bootstrap, subscribe=topic)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )


def test_per_partition_offset_ranges(spark, spark_broker, events):
    topic, delivered = events
    ends = {p: 1 + max(d["offset"] for d in delivered if d["partition"] == p) for p in range(3)}
    starting = f'{{"{topic}":{{"0":10,"1":-2,"2":{ends[2] - 5}}}}}'
    ending = f'{{"{topic}":{{"0":20,"1":5,"2":-1}}}}'
    df = read(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=starting, endingOffsets=ending)
    bounds = {0: (10, 20), 1: (0, 5), 2: (ends[2] - 5, ends[2])}
    want = {
        k: v[:4]
        for k, v in expected_rows(delivered).items()
        if bounds[k[0]][0] <= k[1] < bounds[k[0]][1]
    }
    assert rows_of(df) == want
    ranges = {
        r["partition"]: (r["lo"], r["hi"], r["n"])
        for r in df.groupBy("partition").agg({"offset": "min"}).withColumnRenamed("min(offset)", "lo")
        .join(df.groupBy("partition").agg({"offset": "max"}).withColumnRenamed("max(offset)", "hi"), "partition")
        .join(df.groupBy("partition").count().withColumnRenamed("count", "n"), "partition")
        .collect()
    }
    assert ranges == {0: (10, 19, 10), 1: (0, 4, 5), 2: (ends[2] - 5, ends[2] - 1, 5)}


def test_assign_and_subscribe_pattern(spark, spark_broker, events):
    topic, delivered = events
    df = read(spark, spark_broker.bootstrap, assign=f'{{"{topic}":[1]}}')
    assert rows_of(df) == {k: v[:4] for k, v in expected_rows(delivered).items() if k[0] == 1}
    df = read(spark, spark_broker.bootstrap, subscribePattern=topic.replace("events-", "ev.nts-"))
    assert df.count() == len(delivered)
    assert read(spark, spark_broker.bootstrap, subscribePattern="no-such-topic-.*").count() == 0


def test_starting_and_ending_timestamps(spark, spark_broker, events):
    topic, delivered = events
    start, end = T0 + 10 * 100, T0 + 10 * 200
    df = read(
        spark,
        spark_broker.bootstrap,
        subscribe=topic,
        startingTimestamp=str(start),
        endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{end},"1":{end},"2":{end}}}}}',
    )
    want = {k: v[:4] for k, v in expected_rows(delivered).items() if start <= v[2] < end}
    assert rows_of(df) == want
    with pytest.raises(Exception, match="no record at or after the starting timestamp"):
        read(spark, spark_broker.bootstrap, subscribe=topic, startingTimestamp=str(T0 * 2)).count()
    late = read(
        spark,
        spark_broker.bootstrap,
        subscribe=topic,
        startingTimestamp=str(T0 * 2),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0


def test_one_partition_split_into_several_tasks(spark, spark_broker):
    topic = create_topic(spark_broker.bootstrap, unique_topic("hot"), 1)
    delivered = produce(spark_broker.bootstrap, topic, make_records(1000))
    want = {k: v[:4] for k, v in expected_rows(delivered).items()}
    df = read(spark, spark_broker.bootstrap, subscribe=topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    assert rows_of(df) == want
    by_task = df.rdd.mapPartitions(lambda rows: [sorted(r["offset"] for r in rows)]).collect()
    assert [(b[0], b[-1]) for b in by_task] == [(0, 249), (250, 499), (500, 749), (750, 999)]
    df = read(spark, spark_broker.bootstrap, subscribe=topic, maxRecordsPerPartition="300")
    assert df.rdd.getNumPartitions() == 4
    assert rows_of(df) == want


def test_every_codec_online_and_offline(spark, spark_broker):
    topics, want = [], {}
    for codec in CODECS:
        topic = create_topic(spark_broker.bootstrap, unique_topic(f"codec-{codec}"), 2)
        delivered = produce(spark_broker.bootstrap, topic, make_records(200), **{"compression.type": codec})
        topics.append(topic)
        want[topic] = expected_rows(delivered)
    for options in (
        {"kafka.bootstrap.servers": spark_broker.bootstrap},
        {"logDirs": str(spark_broker.data_dir)},
    ):
        df = read(spark, subscribe=",".join(topics), includeHeaders="true", **options)
        for topic in topics:
            assert rows_of(df.where(df.topic == topic), headers=True) == want[topic], (topic, options)
    # The batches on disk really are compressed with each codec: some of them, as librdkafka
    # sends a batch uncompressed when compressing does not make it smaller (a batch of one
    # small record, say).
    for codec, topic in zip(CODECS, topics):
        segments = [path.read_bytes() for path in spark_broker.data_dir.glob(f"{topic}-*/*.log")]
        codecs = {header.compression.name.lower() for data in segments for _, header in iter_batches(data)}
        assert codec in codecs, (topic, codecs)


def consume_all(bootstrap: str, topic: str) -> dict[int, tuple]:
    """offset -> (key, value) of partition 0, read with a plain consumer."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.partition.eof": True, "enable.auto.commit": False}
    )
    records = {}
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return records
            records[msg.offset()] = (msg.key(), msg.value())
    finally:
        consumer.close()
    raise AssertionError("end of partition not reached")


def test_compacted_topic_with_offset_gaps(spark, spark_broker):
    topic = create_topic(
        spark_broker.bootstrap,
        unique_topic("compacted"),
        1,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
            "file.delete.delay.ms": "0",
        },
    )
    updates = [{"key": b"k%d" % (i % 20), "value": b"k%d:%d:" % (i % 20, i) + b"x" * 40} for i in range(1000)]
    produce(spark_broker.bootstrap, topic, updates, **{"batch.size": 1024, "linger.ms": 2})

    def compacted_and_settled():
        first = consume_all(spark_broker.bootstrap, topic)
        time.sleep(1)
        second = consume_all(spark_broker.bootstrap, topic)
        return second if len(second) < 500 and first == second else None

    records = wait_for(compacted_and_settled, 60, "the cleaner to compact the topic")
    offsets = sorted(records)
    assert offsets[-1] + 1 > len(offsets)  # there are gaps
    latest = {}
    for i, update in enumerate(updates):
        latest[update["key"]] = update["value"]
    assert {records[o][0]: records[o][1] for o in offsets if records[o][0] in latest} == latest
    for options in (
        {"kafka.bootstrap.servers": spark_broker.bootstrap},
        {"logDirs": str(spark_broker.data_dir)},
    ):
        for split in ({}, {"minPartitions": "7"}):
            df = read(spark, subscribe=topic, **options, **split)
            got = {o: (k, v) for (_, o), (k, v, _, _) in rows_of(df).items()}
            assert got == records, (options, split)


def test_offline_while_the_broker_runs_matches_online(spark, spark_broker, events):
    topic, delivered = events
    df = read(spark, logDirs=str(spark_broker.data_dir), subscribe=topic, includeHeaders="true")
    assert rows_of(df, headers=True) == expected_rows(delivered)


def test_offline_jbod_with_the_broker_down_and_a_torn_tail(spark, tmp_path):
    dirs = [tmp_path / "disk1", tmp_path / "disk2"]
    broker = BrokerProcess(tmp_path / "disk1", {"log.dirs": ",".join(map(str, dirs))}).start()
    try:
        topic = create_topic(broker.bootstrap, unique_topic("jbod"), 4, **{"segment.bytes": "8192"})
        delivered = produce(broker.bootstrap, topic, make_records(600), **{"compression.type": "lz4", "batch.size": 2000})
    finally:
        broker.stop()
    homes = {p: next(d for d in dirs if (d / f"{topic}-{p}").is_dir()) for p in range(4)}
    assert set(homes.values()) == set(dirs)  # spread over both disks
    # A crash in the middle of a write: half a batch at the end of a partition's last segment.
    partition_dir = homes[0] / f"{topic}-0"
    last = sorted(partition_dir.glob("*.log"))[-1]
    whole = last.read_bytes()
    end = 1 + max(d["offset"] for d in delivered if d["partition"] == 0)
    torn = build_batch([Record(end, T0, b"torn", b"x" * 500)])
    with open(last, "ab") as f:
        f.write(torn[: len(torn) // 2])
    options = {"logDirs": ",".join(map(str, dirs)), "subscribe": topic, "includeHeaders": "true"}
    assert rows_of(read(spark, **options), headers=True) == expected_rows(delivered)
    df = read(spark, **options, minPartitions="9")
    assert df.rdd.getNumPartitions() >= 9
    assert rows_of(df, headers=True) == expected_rows(delivered)
    assert last.read_bytes().startswith(whole) and len(last.read_bytes()) > len(whole)  # untouched


def test_data_loss_fails_or_skips(spark, spark_broker):
    topic = create_topic(spark_broker.bootstrap, unique_topic("loss"), 1)
    delivered = produce(spark_broker.bootstrap, topic, make_records(100))
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 40)]).values():
        future.result(TIMEOUT_S)
    starting = f'{{"{topic}":{{"0":10}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=starting).count()
    df = read(spark, spark_broker.bootstrap, subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    assert sorted(o for _, o in rows_of(df)) == list(range(40, 100))
    # earliest starts at the log start: nothing is lost.
    assert read(spark, spark_broker.bootstrap, subscribe=topic).count() == 60
    assert len(delivered) == 100


def test_log_append_time(spark, spark_broker):
    topic = create_topic(
        spark_broker.bootstrap, unique_topic("append-time"), 1, **{"message.timestamp.type": "LogAppendTime"}
    )
    before = int(time.time() * 1000)
    produce(spark_broker.bootstrap, topic, make_records(20))
    rows = rows_of(read(spark, spark_broker.bootstrap, subscribe=topic))
    assert {v[3] for v in rows.values()} == {1}
    assert all(before - 1000 <= v[2] <= time.time() * 1000 + 1000 for v in rows.values())


def test_write_then_read_back(spark, spark_broker):
    one = create_topic(spark_broker.bootstrap, unique_topic("written"), 3)
    two = create_topic(spark_broker.bootstrap, unique_topic("written"), 1)
    rows = [
        (b"k%d" % i if i % 5 else None, "v%d" % i, one if i % 4 else two, None if i % 3 else i % 3,
         [("h", b"%d" % i), ("z", None)] if i % 2 else [])
        for i in range(200)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value string, topic string, partition int, headers array<struct<key:string,value:binary>>"
    )
    df.write.format("logway").option("kafka.bootstrap.servers", spark_broker.bootstrap).mode("append").save()
    back = read(spark, spark_broker.bootstrap, subscribe=f"{one},{two}", includeHeaders="true").collect()
    got = sorted((
        (r["topic"], bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"]),
         [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]])
        for r in back
    ), key=repr)
    want = sorted(((t, k, v.encode(), [tuple(h) for h in hs]) for k, v, t, _, hs in rows), key=repr)
    assert got == want
    assert {r["partition"] for r in back if r["topic"] == two} == {0}
    # Explicit partitions were honoured; keyed rows of a key share one partition.
    by_value = {bytes(r["value"]).decode(): r for r in back}
    for k, v, t, p, _ in rows:
        if p is not None and t == one:
            assert by_value[v]["partition"] == p
    # The topic option wins over the column; overwriting a topic is refused.
    three = create_topic(spark_broker.bootstrap, unique_topic("written"), 1)
    df.write.format("logway").option("kafka.bootstrap.servers", spark_broker.bootstrap).option(
        "topic", three
    ).mode("append").save()
    assert read(spark, spark_broker.bootstrap, subscribe=three).count() == 200
    with pytest.raises(Exception, match="cannot be overwritten"):
        df.write.format("logway").option("kafka.bootstrap.servers", spark_broker.bootstrap).mode("overwrite").save()


def test_stream_in_micro_batches(spark, spark_broker, tmp_path):
    topic = create_topic(spark_broker.bootstrap, unique_topic("stream"), 2)
    delivered = produce(spark_broker.bootstrap, topic, make_records(500))
    stream = (
        spark.readStream.format("logway")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "120")
        .load()
    )
    name = "stream_" + topic.replace("-", "_")
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert len(batches) >= 5  # 500 offsets, at most 120 a micro-batch
    assert all(p["numInputRows"] <= 120 for p in batches)
    assert rows_of(spark.table(name)) == {k: v[:4] for k, v in expected_rows(delivered).items()}


def test_range_reader_meets_deleted_offsets_and_missing_ones(spark_broker):
    """The task side alone: records deleted after planning, and a range end never reached."""
    from spark_jobs.online import read_range
    from spark_jobs.options import parse_read_options
    from spark_jobs.planning import DataLossError, OffsetRange

    topic = create_topic(spark_broker.bootstrap, unique_topic("range-reader"), 1)
    produce(spark_broker.bootstrap, topic, make_records(50))
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(TIMEOUT_S)
    base = {"kafka.bootstrap.servers": spark_broker.bootstrap, "subscribe": topic}
    with pytest.raises(DataLossError, match="out of range"):
        list(read_range(parse_read_options(base), OffsetRange(topic, 0, 5, 30)))
    lenient = parse_read_options({**base, "failOnDataLoss": "false"})
    assert [r[0] for r in read_range(lenient, OffsetRange(topic, 0, 5, 30))] == list(range(20, 30))
    assert list(read_range(lenient, OffsetRange(topic, 0, 5, 15))) == []
    impatient = parse_read_options({**base, "kafkaConsumer.pollTimeoutMs": "1500"})
    with pytest.raises(TimeoutError, match="from offset 50"):
        list(read_range(impatient, OffsetRange(topic, 0, 45, 60)))
