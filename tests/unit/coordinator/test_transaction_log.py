"""__transaction_state records in Kafka's layouts."""

import pytest

from coordinator import transaction_log
from coordinator.transaction_log import TransactionLogValue, TxnState
from protocol.primitives import INT16, INT32, INT64, encode_string
from storage.topic_partition import TopicPartition


def test_key_is_version_zero_and_the_id():
    assert transaction_log.encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert transaction_log.decode_key(b"\x00\x00\x00\x02tx") == "tx"
    with pytest.raises(transaction_log.UnsupportedRecordVersionError):
        transaction_log.decode_key(b"\x00\x01\x00\x02tx")


def test_value_v0_layout_and_round_trip():
    value = TransactionLogValue(
        7, 3, 60000, TxnState.ONGOING, frozenset({TopicPartition("b", 2), TopicPartition("a", 1), TopicPartition("b", 0)}), 11, 10
    )
    encoded = transaction_log.encode_value(value)
    expected = (
        INT16.pack(0) + INT64.pack(7) + INT16.pack(3) + INT32.pack(60000) + b"\x01"
        + INT32.pack(2)
        + encode_string("a", False) + INT32.pack(1) + INT32.pack(1)
        + encode_string("b", False) + INT32.pack(2) + INT32.pack(0) + INT32.pack(2)
        + INT64.pack(11) + INT64.pack(10)
    )
    assert encoded == expected
    assert transaction_log.decode_value(encoded) == value


def test_value_v1_tagged_fields_are_skipped():
    tagged = b"\x01\x00\x08" + INT64.pack(5)  # PreviousProducerId
    data = (
        INT16.pack(1) + INT64.pack(7) + INT16.pack(0) + INT32.pack(100) + b"\x04"
        + b"\x02" + b"\x02a" + b"\x02" + INT32.pack(0) + b"\x00"
        + INT64.pack(2) + INT64.pack(1) + tagged
    )
    value = transaction_log.decode_value(data)
    assert value.state is TxnState.COMPLETE_COMMIT
    assert value.partitions == {TopicPartition("a", 0)}


def test_state_names_are_kafkas():
    assert TxnState.PREPARE_EPOCH_FENCE.display_name == "PrepareEpochFence"
    assert TxnState.COMPLETE_ABORT.display_name == "CompleteAbort"
