"""A KafkaJS consumer group (js/groups.js: two members in one node process, subscribe + run with
eachMessage, a commit after each message) against a real broker process, over real sockets:
every message is processed exactly once across the members, and the committed offsets, read
with confluent-kafka's AdminClient as well as KafkaJS's own admin, are the partitions' ends.

The npm packages are pinned in js/package-lock.json; `.ci/setup test` installs them with npm ci.
"""

import json

from tests.compat.group_support import (
    committed_offsets,
    create_topic,
    value_of,
)
from tests.compat.kafkajs_support import JS_DIR, KAFKAJS_MARKS
from tests.harness import run, unique_topic

pytestmark = KAFKAJS_MARKS

PARTITIONS = 4  # as groups.js has it
PER_PARTITION = 15


def test_kafkajs_group_processes_every_message_once_and_commits(group_broker):
    topic, group = unique_topic("kjs-group"), unique_topic("kjs-group-id")
    create_topic(group_broker.bootstrap, topic, PARTITIONS)

    arguments = [group_broker.bootstrap, topic, group, str(PER_PARTITION)]
    result = run(["node", str(JS_DIR / "groups.js"), *arguments], timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-5000:]
    report = json.loads(result.stdout)

    # Two partitions each, and no rebalance between the balanced assignment and the end.
    assigned = sorted(p for assignment in report["assignments"] for p in assignment)
    assert assigned == list(range(PARTITIONS))
    assert [m["assignment"] for m in report["members"]] == report["assignments"]

    processed = [
        (r["partition"], r["offset"], r["value"]) for m in report["members"] for r in m["processed"]
    ]
    assert len(processed) == len(set(processed)), "a message processed twice"
    assert sorted(processed) == [
        (p, offset, value_of(p, offset).decode())
        for p in range(PARTITIONS)
        for offset in range(PER_PARTITION)
    ]
    for member in report["members"]:
        partitions = {r["partition"] for r in member["processed"]}
        assert partitions == set(member["assignment"]), member["name"]

    ends = dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert committed_offsets(group_broker.bootstrap, group, topic, PARTITIONS) == ends
    assert report["fetchedOffsets"] == [
        {"partition": p, "offset": PER_PARTITION} for p in range(PARTITIONS)
    ]
    # Both members left: the group is Empty (its offsets stay).
    assert report["describedAfter"] == [{"groupId": group, "state": "Empty", "members": 0}]
