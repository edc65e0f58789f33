"""A confluent-kafka group member in a process of its own, for test_groups_confluent.py, which
kills it with SIGKILL so that it never leaves its group.

It reports on stdout, one JSON document a line, each assignment it gets ({"assignment": [...]})
and each offset the broker acknowledged as committed ({"committed": [partition, offset]}): it
commits synchronously after processing each message. After COUNT messages it stops consuming and
says {"paused": true}: librdkafka's own thread keeps heartbeating, and no commit of its can be in
flight when it is killed. It exits by itself after PAUSE_LIMIT_S, should nobody kill it.

Usage: python committing_consumer.py BOOTSTRAP GROUP TOPIC COUNT SESSION_TIMEOUT_MS
"""

import json
import sys
import time

from confluent_kafka import Consumer

POLL_LIMIT_S = 60
PAUSE_LIMIT_S = 60


def report(document: dict) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


def main() -> None:
    bootstrap, group, topic, count, session_timeout_ms = sys.argv[1:]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "killed-member",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": int(session_timeout_ms),
            "heartbeat.interval.ms": 250,
            "max.poll.interval.ms": 15_000,
        }
    )

    def on_assign(_consumer, assigned) -> None:
        report({"assignment": sorted(tp.partition for tp in assigned)})

    # Eager (range) assignor: a revocation takes everything.
    consumer.subscribe(
        [topic], on_assign=on_assign, on_revoke=lambda _c, _revoked: report({"assignment": []})
    )
    processed = 0
    deadline = time.monotonic() + POLL_LIMIT_S
    while processed < int(count) and time.monotonic() < deadline:
        message = consumer.poll(0.05)
        if message is None:
            continue
        if message.error() is not None:
            raise SystemExit(f"consumer error: {message.error()}")
        for tp in consumer.commit(message=message, asynchronous=False):
            if tp.error is not None:
                raise SystemExit(f"commit of {tp} failed: {tp.error}")
            report({"committed": [tp.partition, tp.offset]})
        processed += 1
    report({"paused": True})
    time.sleep(PAUSE_LIMIT_S)


if __name__ == "__main__":
    main()
