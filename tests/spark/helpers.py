"""Helpers of the Spark tests: topics, producing, and rows read back."""

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

SPARK_MARKS = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark")]
TIMEOUT_S = 30


def create_topic(bootstrap: str, topic: str, partitions: int = 1, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config)])[topic].result(TIMEOUT_S)
    return topic


def produce(
    bootstrap: str,
    topic: str,
    records: list[dict],
    **producer_config,
) -> list[dict]:
    """Produce records (dicts of key, value, headers, partition, timestamp; all optional but
    value) and return them with the partition and offset each got, in delivery order."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": False,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            **producer_config,
        }
    )
    delivered, errors = [], []

    def on_delivery(err, msg, record):
        if err is not None:
            errors.append(err)
        else:
            delivered.append({**record, "partition": msg.partition(), "offset": msg.offset()})

    for record in records:
        kwargs = {k: record[k] for k in ("key", "value", "headers", "timestamp") if k in record}
        if record.get("partition") is not None:
            kwargs["partition"] = record["partition"]
        producer.produce(topic, on_delivery=lambda err, msg, r=record: on_delivery(err, msg, r), **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    return delivered


def rows_of(df, headers: bool = False) -> dict[tuple[int, int], tuple]:
    """(partition, offset) -> (key, value, timestamp ms, timestampType[, headers]) of a
    DataFrame of the logway schema."""
    columns = ["partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"]
    if headers:
        columns.append("headers")
    result = {}
    for row in df.selectExpr(*columns).collect():
        value = (
            None if row["key"] is None else bytes(row["key"]),
            None if row["value"] is None else bytes(row["value"]),
            row["ts"],
            row["timestampType"],
        )
        if headers:
            value += (
                [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in row["headers"]],
            )
        key = (row["partition"], row["offset"])
        assert key not in result, f"{key} read twice"
        result[key] = value
    return result


def wait_for(condition, timeout: float = TIMEOUT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
