"""The writer's transactions in local Spark against a broker process: a task failing half-way
on its first attempt and retried writes every row exactly once for read_committed readers (a
confluent-kafka consumer, the logway source online and offline), while read_uncommitted readers
see the aborted attempt's rows too; with transactional=false the retry duplicates them."""

from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from tests.harness import unique_topic
from tests.spark.helpers import SPARK_MARKS, TIMEOUT_S, create_topic, wait_for

pytestmark = SPARK_MARKS

ROWS = 400
FAIL_AFTER = 120  # of the 200 rows each of the two tasks writes


def rows_to_write(spark):
    rows = [(b"k%d" % i, b"v%d-" % i + b"x" * (i % 50)) for i in range(ROWS)]
    df = spark.createDataFrame(rows, "key binary, value binary").repartition(2)
    return rows, df


def write_failing_once(df, bootstrap: str, topic: str, **options) -> None:
    writer = (
        df.write.format("logway")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("injectFailureAfterRows", str(FAIL_AFTER))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def consume_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(key, value) of every record a consumer at `isolation` reads, up to the end offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records, at_end = [], set()

    def done():
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is None:
                records.append((message.key(), message.value()))
            elif message.error().code() == message.error()._PARTITION_EOF:
                at_end.add(message.partition())
            else:
                raise AssertionError(message.error())
        return len(at_end) == partitions

    try:
        wait_for(done, TIMEOUT_S, f"the end of {topic}")
    finally:
        consumer.close()
    return records


def read_values(spark, **options) -> Counter:
    reader = spark.read.format("logway")
    for key, value in options.items():
        reader = reader.option(key, value)
    return Counter((bytes(r["key"]), bytes(r["value"])) for r in reader.load().collect())


def test_a_task_failing_half_way_is_retried_exactly_once_for_read_committed(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("txn-write"), 2)
    rows, df = rows_to_write(spark)
    assert df.rdd.getNumPartitions() == 2
    write_failing_once(df, bootstrap, topic)
    want = Counter(rows)
    assert Counter(consume_all(bootstrap, topic, 2, "read_committed")) == want
    source = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    assert read_values(spark, **source, **{"kafka.isolation.level": "read_committed"}) == want
    offline = {"logDirs": str(spark_broker.data_dir), "subscribe": topic}
    assert read_values(spark, **offline, **{"kafka.isolation.level": "read_committed"}) == want
    # Each task's first attempt wrote FAIL_AFTER rows (acked) before failing: aborted, they
    # are there for read_uncommitted readers only.
    uncommitted = Counter(consume_all(bootstrap, topic, 2, "read_uncommitted"))
    assert read_values(spark, **source) == uncommitted
    assert set(uncommitted) == set(want)
    assert sum(uncommitted.values()) == ROWS + 2 * FAIL_AFTER
    assert sorted(Counter(uncommitted.values()).items()) == [(1, ROWS - 2 * FAIL_AFTER), (2, 2 * FAIL_AFTER)]


def test_without_transactions_a_retried_task_duplicates(spark, spark_broker):
    bootstrap = spark_broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("idempotent-write"), 2)
    rows, df = rows_to_write(spark)
    write_failing_once(df, bootstrap, topic, transactional="false")
    committed = Counter(consume_all(bootstrap, topic, 2, "read_committed"))
    assert set(committed) == set(rows)
    assert sum(committed.values()) == ROWS + 2 * FAIL_AFTER
