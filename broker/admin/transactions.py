"""`logway-admin transactions` and `logway-admin producers`: kafka-transactions.sh.

    logway-admin transactions --bootstrap-server H:P list [--duration-filter MS]
    logway-admin transactions --bootstrap-server H:P describe --transactional-id X
    logway-admin transactions --bootstrap-server H:P describe-producers --topic T --partition P [--broker-id B]
    logway-admin producers --bootstrap-server H:P --topic T [--partition P ...] [--broker-id B]

list asks every broker (ListTransactions) and prints TransactionalId Coordinator ProducerId
TransactionState; describe asks the transactional id's coordinator (DescribeTransactions);
describe-producers asks the partition's leader, or the broker given (DescribeProducers), and
prints ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
CurrentTransactionStartOffset. Tables as Kafka's ToolsUtils.prettyPrintTable (tab after every
column). `producers` is describe-producers over several partitions (all of the topic's without
--partition), with Topic and Partition columns first.
"""

import argparse
import time

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v1.request import ListTransactionsRequest

from broker.admin.connection import TRANSACTION_KEY, Admin, check, failure
from broker.admin.output import pretty_table

PRODUCER_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                    "CurrentTransactionStartOffset")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions")
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "producers":
        parser.add_argument("--topic", required=True)
        parser.add_argument("--partition", type=int, action="append", default=[])
        parser.add_argument("--broker-id", type=int, help="ask this replica rather than the leader")
        parser.set_defaults(action="producers")
        return
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="list transactions")
    listing.add_argument("--duration-filter", type=int, help="only transactions running longer than this (ms)")
    describe = actions.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True)
    producers = actions.add_parser("describe-producers", help="the active producers of a topic partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.add_argument("--broker-id", type=int)


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.action == "list":
        print(pretty_table(LIST_HEADERS, await list_transactions(admin, args.duration_filter)))
    elif args.action == "describe":
        print(pretty_table(DESCRIBE_HEADERS, [await describe(admin, args.transactional_id)]))
    elif args.action == "describe-producers":
        states = await producers(admin, args.topic, [args.partition], args.broker_id)
        print(pretty_table(PRODUCER_HEADERS, [row for _, rows in states for row in rows]))
    else:
        partitions = args.partition or sorted(p for _, p in await _partitions(admin, args.topic))
        states = await producers(admin, args.topic, partitions, args.broker_id)
        print(pretty_table(("Topic", "Partition", *PRODUCER_HEADERS),
                           [(args.topic, partition, *row) for partition, rows in states for row in rows]))
    return 0


async def _partitions(admin: Admin, topic: str) -> list[tuple[str, int]]:
    metadata = await admin.metadata([topic])
    check(metadata.topics[0].error_code, f"Metadata of topic {topic}")
    return [(topic, p.partition_index) for p in metadata.topics[0].partitions]


async def list_transactions(admin: Admin, duration_filter: int | None) -> list[tuple]:
    rows = []
    for node in sorted(admin.broker_addresses):
        response = await admin.send(ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=-1 if duration_filter is None else duration_filter,
        ), node=node)
        check(response.error_code, f"Failed to list transactions on broker {node}")
        rows += [(s.transactional_id, node, s.producer_id, s.transaction_state) for s in response.transaction_states]
    return rows


async def describe(admin: Admin, transactional_id: str) -> tuple:
    coordinator = await admin.coordinator(transactional_id, TRANSACTION_KEY)
    response = await admin.send(DescribeTransactionsRequest(transactional_ids=(transactional_id,)), node=coordinator)
    state = response.transaction_states[0]
    check(state.error_code, f"Failed to describe transaction state of transactional-id `{transactional_id}`")
    start = int(state.transaction_start_time.timestamp() * 1000) if state.transaction_start_time is not None else -1
    started = start >= 0 and state.transaction_state not in ("Empty", "CompleteCommit", "CompleteAbort")
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    return (
        coordinator, transactional_id, state.producer_id, state.producer_epoch, state.transaction_state,
        int(state.transaction_timeout.total_seconds() * 1000),
        start if started else "None", int(time.time() * 1000) - start if started else "None", partitions,
    )


async def producers(admin: Admin, topic: str, partitions: list[int], broker_id: int | None) -> list[tuple[int, list]]:
    """Per partition, its producers' rows (PRODUCER_HEADERS), from its leader or `broker_id`."""
    if broker_id is None:
        leaders = await admin.leaders([(topic, p) for p in partitions])
    else:
        await admin.metadata([])
        leaders = {(topic, p): broker_id for p in partitions}
    found = []
    for partition in partitions:
        node = leaders[(topic, partition)]
        response = await admin.send(DescribeProducersRequest(
            topics=(TopicRequest(name=topic, partition_indexes=(partition,)),)
        ), node=node)
        result = response.topics[0].partitions[0]
        if result.error_code:
            where = f"broker {broker_id}" if broker_id is not None else "leader"
            raise failure(result.error_code, f"Failed to describe producers for partition {topic}-{partition} on {where}",
                          result.error_message)
        found.append((partition, [
            (s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
             s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None")
            for s in result.active_producers
        ]))
    return found
