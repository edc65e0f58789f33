"""A broker in the test's own process, spoken to through its dispatcher: request frames in,
response objects out, no sockets.

    async with running_broker(tmp_path, {"group.initial.rebalance.delay.ms": "0"}) as broker:
        response = await Client(broker).call(ApiKey.METADATA, 12, MetadataRequest(...))
"""

import contextlib
import inspect
from typing import Any

from broker.config import BrokerConfig
from broker.server import Broker
from broker.session import Session
from coordinator.group_coordinator import OFFSETS_TOPIC
from coordinator.records import decode_key
from protocol.record_batch import split_batches
from protocol.records import iter_records
from storage.records_file import FileRegion
from storage.topic_partition import TopicPartition
from tests.harness import TEST_BROKER_DEFAULTS
from tests.kafka_wire import decode_response, encode_request

CLIENT_ADDRESS = "127.0.0.1:50000"
# A plaintext connection on the client listener.
CLIENT_SESSION = Session(CLIENT_ADDRESS, "PLAINTEXT")


def broker_config(tmp_path, extra: dict | None = None) -> BrokerConfig:
    return BrokerConfig().with_overrides(
        {
            "log.dirs": str(tmp_path),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:0",
            **TEST_BROKER_DEFAULTS,
            **(extra or {}),
        }
    )


@contextlib.asynccontextmanager
async def running_broker(tmp_path, extra: dict | None = None):
    broker = Broker(broker_config(tmp_path, extra))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


class Client:
    """Sends requests straight to a broker's dispatcher, as a connection would."""

    def __init__(self, broker: Broker, client_id: str = "test", session: Session = CLIENT_SESSION) -> None:
        """`session`: the connection the requests come on (its principal is what authorization
        decides on)."""
        self.broker = broker
        self.client_id = client_id
        self.session = session

    async def call(self, api_key: int, version: int, request: Any) -> Any:
        return decode_response(api_key, version, await self.call_for_frame(api_key, version, request))

    async def call_for_frame(self, api_key: int, version: int, request: Any) -> bytes:
        """The whole response frame, for answers kio cannot read (negative timestamps)."""
        frame = encode_request(api_key, version, request, client_id=self.client_id)
        # Writable, as a connection's receive buffer is: Produce patches batches in place.
        chunks = self.broker._dispatcher.dispatch(memoryview(bytearray(frame))[4:], self.session)
        if inspect.isawaitable(chunks):
            chunks = await chunks
        return b"".join(_bytes(chunk) for chunk in chunks)


def _bytes(chunk) -> bytes:
    """A response chunk's bytes: record data comes as file regions (sent with sendfile)."""
    return chunk.read() if isinstance(chunk, FileRegion) else bytes(chunk)


def offsets_log_records(broker: Broker, group_id: str) -> list[tuple[Any, bytes | None]]:
    """(decoded key, value) of every record in the group's __consumer_offsets partition, in log
    order (a value of None is a tombstone)."""
    tp = TopicPartition(OFFSETS_TOPIC, broker.group_coordinator.partition_for(group_id))
    log = broker.replica_manager.get_partition(tp).log
    region = log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)
    if region is None:
        return []
    data = region.read()
    found = []
    for position, size in split_batches(data):
        for record in iter_records(data[position : position + size]):
            found.append((decode_key(record.key), record.value))
    return found
