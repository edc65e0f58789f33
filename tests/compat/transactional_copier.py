"""The consume-transform-produce loop in a process of its own, for test_transactions_confluent.py,
which kills it with SIGKILL at random points and starts it again.

It consumes SOURCE in the consumer group GROUP and copies each record's value to partition 0 of
TARGET, in transactions of up to BATCH records that also carry the group's offsets
(send_offsets_to_transaction): a record is in TARGET, committed, exactly when its offset is
committed. Its transactional id is fixed, so a new copier fences the one before it and aborts its
open transaction. It reports each commit on stdout ({"committed": n}) and exits by itself after
RUN_LIMIT_S, should nobody kill it.

Usage: python transactional_copier.py BOOTSTRAP GROUP SOURCE TARGET TRANSACTIONAL_ID
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer

BATCH = 7
RUN_LIMIT_S = 90
TIMEOUT_S = 30


def main() -> None:
    bootstrap, group, source, target, transactional_id = sys.argv[1:]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 250,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 30_000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    deadline = time.monotonic() + RUN_LIMIT_S
    while time.monotonic() < deadline:
        messages = [m for m in consumer.consume(BATCH, 0.5) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(target, message.value(), partition=0)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), TIMEOUT_S
        )
        producer.commit_transaction(TIMEOUT_S)
        sys.stdout.write(json.dumps({"committed": len(messages)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
