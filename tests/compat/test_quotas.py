"""Client quotas against a real broker process, over real sockets: a confluent-kafka (librdkafka)
producer and consumer held to their client-id's byte rates, and a client without a quota at full
speed.

Quotas are set with AlterClientQuotas through tests/kafka_wire.py: neither confluent-kafka nor
kafka-python has that admin call. The broker keeps Kafka's defaults (11 windows of 1 s). As with
Kafka, a throttled client's traffic comes in bursts once per 11 s: a client may use 10 windows'
worth at once, and again whenever the sample holding its last burst expires, with a trickle in
between. So the rate is measured over one whole such span, the last MEASURE_S = 11 s of a run
(after the first span, which holds the first burst), and must be within TOLERANCE of the quota.
The broker counts request (produce) or response (fetch) bytes, a few percent above the payload
counted here.
"""

import socket
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.harness import unique_topic
from tests.kafka_wire import call

pytestmark = pytest.mark.compat

QUOTA = 200 * 1024  # bytes per second
VALUE = b"q" * 1000
RUN_S = 22
MEASURE_S = 11
TOLERANCE = 0.25
TIMEOUT_S = 20


def set_quota(bootstrap: str, client_id: str, key: str, value: float | None) -> None:
    """producer_byte_rate / consumer_byte_rate of a client-id; None removes it."""
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type="client-id", entity_name=client_id),),
                ops=(OpData(key=key, value=value or 0.0, remove=value is None),),
            ),
        ),
        validate_only=False,
    )
    with socket.create_connection(_address(bootstrap), timeout=10) as sock:
        response = call(sock, ApiKey.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]


def described(bootstrap: str, client_id: str) -> dict[str, float]:
    request = DescribeClientQuotasRequest(
        components=(ComponentData(entity_type="client-id", match_type=0, match=client_id),), strict=False
    )
    with socket.create_connection(_address(bootstrap), timeout=10) as sock:
        response = call(sock, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
    assert response.error_code == ErrorCode.none
    return {v.key: v.value for entry in response.entries for v in entry.values}


def _address(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def create_topic(bootstrap: str, prefix: str) -> str:
    topic = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=TIMEOUT_S)
    return topic


class Throttles:
    """librdkafka's throttle_cb: the throttle times the broker reported."""

    def __init__(self) -> None:
        self.times_ms: list[int] = []

    def __call__(self, event) -> None:
        self.times_ms.append(event.throttle_time)


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float, throttles: Throttles) -> list[float]:
    """Produce as fast as the producer can for `seconds`; the delivery times of every message."""
    delivered: list[float] = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(time.monotonic())

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": "all",
        "enable.idempotence": False,
        "linger.ms": 5,
        "queue.buffering.max.kbytes": 64,  # a short queue: delivery times follow the broker's pace
        "batch.size": 16384,
        "throttle_cb": throttles,
    })
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S + 15) == 0
    return delivered


def rate_over_last(times: list[float], end: float, seconds: float) -> float:
    """Payload bytes per second delivered in the `seconds` before `end`."""
    return sum(1 for t in times if end - seconds <= t < end) * len(VALUE) / seconds


def test_a_producer_over_its_byte_rate_converges_to_it_and_sees_the_throttle(shared_broker):
    topic = create_topic(shared_broker.bootstrap, "quota-produce")
    set_quota(shared_broker.bootstrap, "quota-producer", "producer_byte_rate", QUOTA)
    assert described(shared_broker.bootstrap, "quota-producer") == {"producer_byte_rate": QUOTA}
    throttles = Throttles()
    start = time.monotonic()
    delivered = produce_for(shared_broker.bootstrap, topic, "quota-producer", RUN_S, throttles)
    rate = rate_over_last(delivered, start + RUN_S, MEASURE_S)
    assert (1 - TOLERANCE) * QUOTA <= rate <= (1 + TOLERANCE) * QUOTA, f"{rate:.0f} B/s against {QUOTA}"
    assert throttles.times_ms and max(throttles.times_ms) > 0

    # Removed: the client-id is back to no quota (no default is set).
    set_quota(shared_broker.bootstrap, "quota-producer", "producer_byte_rate", None)
    assert described(shared_broker.bootstrap, "quota-producer") == {}


def test_a_producer_without_a_quota_is_not_slowed(shared_broker):
    topic = create_topic(shared_broker.bootstrap, "quota-free")
    set_quota(shared_broker.bootstrap, "someone-else", "producer_byte_rate", QUOTA)
    throttles = Throttles()
    start = time.monotonic()
    delivered = produce_for(shared_broker.bootstrap, topic, "quota-free", 3, throttles)
    elapsed = max(delivered) - start
    # Far above the quota another client-id has: 3 s at the quota would be 600 kB.
    assert len(delivered) * len(VALUE) / elapsed > 10 * QUOTA
    assert throttles.times_ms == [] or max(throttles.times_ms) == 0


def test_a_consumer_over_its_byte_rate_converges_to_it(shared_broker):
    topic = create_topic(shared_broker.bootstrap, "quota-consume")
    # More than the consumer can read in RUN_S at its quota (10 windows' worth + RUN_S seconds').
    backlog = int(QUOTA * (10 + RUN_S) * 1.5 / len(VALUE))
    # Batches smaller than a fetch: a fetch returns its first batch whole however large it is,
    # and a throttle is computed with the bytes of the fetch it then holds back (as Kafka's is),
    # so librdkafka's default 1 MB batches throttled for 4 s a fetch and stretched the 11 s span
    # between bursts to about 12.6 s, which the measured span then cut through.
    filler = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 20, "batch.size": 16 * 1024})
    for _ in range(backlog):
        while True:
            try:
                filler.produce(topic, VALUE)
                break
            except BufferError:
                filler.poll(0.05)
    assert filler.flush(TIMEOUT_S) == 0
    set_quota(shared_broker.bootstrap, "quota-consumer", "consumer_byte_rate", QUOTA)

    throttles = Throttles()
    consumer = Consumer({
        "bootstrap.servers": shared_broker.bootstrap,
        "client.id": "quota-consumer",
        "group.id": "logway-compat-unused",  # required by the client; never joined
        "enable.auto.commit": False,
        # Small fetches, so that a measured window holds many of them.
        "fetch.max.bytes": 64 * 1024,
        "message.max.bytes": 64 * 1024,
        "max.partition.fetch.bytes": 64 * 1024,
        "throttle_cb": throttles,
    })
    received: list[float] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        start = time.monotonic()
        while time.monotonic() < start + RUN_S:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                received.append(time.monotonic())
    finally:
        consumer.close()
    assert len(received) < backlog, "the consumer read the whole backlog: it was not held back"
    rate = rate_over_last(received, start + RUN_S, MEASURE_S)
    assert (1 - TOLERANCE) * QUOTA <= rate <= (1 + TOLERANCE) * QUOTA, f"{rate:.0f} B/s against {QUOTA}"
    assert throttles.times_ms and max(throttles.times_ms) > 0


def test_a_quota_on_the_default_user_holds_plaintext_clients_who_are_anonymous(broker):
    # Its own broker: every PLAINTEXT connection is User:ANONYMOUS, so this quota holds them all.
    topic = create_topic(broker.bootstrap, "quota-anonymous")
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type="user", entity_name=None),),
                ops=(OpData(key="producer_byte_rate", value=QUOTA, remove=False),),
            ),
        ),
        validate_only=False,
    )
    with socket.create_connection(_address(broker.bootstrap), timeout=10) as sock:
        assert [e.error_code for e in call(sock, ApiKey.ALTER_CLIENT_QUOTAS, 0, request).entries] == [ErrorCode.none]
    throttles = Throttles()
    delivered = produce_for(broker.bootstrap, topic, "any-client", 4, throttles)
    # 10 windows' worth at once, then throttled: far less than an unthrottled producer's 4 s.
    assert len(delivered) * len(VALUE) < QUOTA * 14
    assert throttles.times_ms and max(throttles.times_ms) > 0
