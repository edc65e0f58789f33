import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid

from replication.mirror.flow import described
from replication.mirror.records import topic_id_text


class Answered:
    """A describe_topics future that is already answered (or failed)."""

    def __init__(self, value=None, error: KafkaError | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout=None):
        if self.error is not None:
            raise KafkaException(self.error)
        return self.value


class Description:
    def __init__(self, topic_id: Uuid, partitions: int) -> None:
        self.topic_id, self.partitions = topic_id, [object()] * partitions


def test_topic_ids_are_kept_as_kafka_writes_them_and_print_as_kafka_prints_them():
    uuid = Uuid(-0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321)  # a negative high half, as Java's long
    answer = described({"orders": Answered(Description(uuid, 3))})
    assert answer["orders"].partitions == 3
    assert answer["orders"].topic_id == (-0x1234_5678_9ABC_DEF0).to_bytes(8, "big", signed=True) + bytes.fromhex("0fedcba987654321")
    assert topic_id_text(answer["orders"].topic_id) == str(uuid)


def test_topics_that_do_not_exist_are_left_out_and_other_errors_raised():
    missing = Answered(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert described({"orders": missing}) == {}
    with pytest.raises(KafkaException):
        described({"orders": Answered(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))})
