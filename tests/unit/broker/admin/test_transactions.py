from broker.admin.output import pretty_table
from broker.admin.transactions import DESCRIBE_HEADERS, LIST_HEADERS, PRODUCER_HEADERS


def test_headers_are_kafka_transactions_commands():
    assert LIST_HEADERS == ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
    assert PRODUCER_HEADERS[0] == "ProducerId" and PRODUCER_HEADERS[-1] == "CurrentTransactionStartOffset"
    assert DESCRIBE_HEADERS[-1] == "TopicPartitions"
    assert pretty_table(LIST_HEADERS, [("tx", 0, 5, "Ongoing")]).splitlines()[1] == "tx             \t0          \t5         \tOngoing         \t"
