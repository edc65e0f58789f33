"""Producer ids for InitProducerId (Kafka's ProducerIdManager): never the same id twice, across
restarts, and in a cluster across brokers.

Ids are handed out from blocks of 1000 (Kafka's block size). A block is claimed from a
`ProducerIdBlockStore` before any id in it is given out, and a claim always starts after the
latest block ever claimed, so a restart (or a crash) abandons what was left of the block it held
rather than reuse it, as Kafka does. The latest block is kept in Kafka's JSON layout of the
ZooKeeper znode /latest_producer_id_block:

    {"version":1,"broker":<broker id>,"block_start":"<first id>","block_end":"<last id>"}

Standalone, `FileProducerIdBlockStore` keeps it in the file logway-producer-id-block.json of every
log dir (the newest readable copy wins, so losing one disk of a JBOD loses nothing); in a
cluster broker.zk_producer_ids compare-and-sets the znode instead, so brokers never claim the
same block.

Thread-safety: `ProducerIdManager` lives on the event loop; a store does its blocking I/O in a
worker thread, one claim at a time.
"""

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from storage.durable_file import replace_durably

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
BLOCK_FILE = "logway-producer-id-block.json"
_BLOCK_VERSION = 1


class ProducerIdBlock(NamedTuple):
    broker_id: int
    first_id: int
    size: int = PRODUCER_ID_BLOCK_SIZE

    @property
    def last_id(self) -> int:
        return self.first_id + self.size - 1

    def next_block(self, broker_id: int) -> "ProducerIdBlock":
        return ProducerIdBlock(broker_id, self.last_id + 1)


def encode_block(block: ProducerIdBlock) -> bytes:
    return json.dumps(
        {
            "version": _BLOCK_VERSION,
            "broker": block.broker_id,
            "block_start": str(block.first_id),
            "block_end": str(block.last_id),
        },
        separators=(",", ":"),
    ).encode()


def decode_block(data: bytes) -> ProducerIdBlock:
    """ValueError for anything that is not a block in Kafka's layout."""
    try:
        document = json.loads(data)
        first, last = int(document["block_start"]), int(document["block_end"])
        broker_id = int(document["broker"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a producer id block: {data[:200]!r}") from exc
    if first < 0 or last < first:
        raise ValueError(f"producer id block [{first}, {last}] is empty or negative")
    return ProducerIdBlock(broker_id, first, last - first + 1)


class ProducerIdBlockStore(Protocol):
    async def claim_block(self, broker_id: int) -> ProducerIdBlock:
        """Record and return a new block after every block claimed so far, by anyone."""
        ...


class FileProducerIdBlockStore:
    """The latest block in a file in every log dir, replaced durably (storage.durable_file)
    before any of its ids is used. A claim succeeds when at least one dir took the new block."""

    def __init__(self, log_dirs: Sequence[str]) -> None:
        self._paths = [os.path.join(d, BLOCK_FILE) for d in log_dirs]

    async def claim_block(self, broker_id: int) -> ProducerIdBlock:
        return await asyncio.to_thread(self._claim_block, broker_id)

    def _claim_block(self, broker_id: int) -> ProducerIdBlock:
        latest = self._latest_block()
        block = latest.next_block(broker_id) if latest else ProducerIdBlock(broker_id, 0)
        stored = 0
        for path in self._paths:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                replace_durably(path, encode_block(block))
                stored += 1
            except OSError as exc:
                log.error("cannot store the producer id block in %s: %s", path, exc)
        if not stored:
            raise OSError("no log directory could store a producer id block")
        return block

    def _latest_block(self) -> ProducerIdBlock | None:
        blocks = []
        for path in self._paths:
            try:
                with open(path, "rb") as f:
                    blocks.append(decode_block(f.read()))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("ignoring %s: %s", path, exc)
        return max(blocks, key=lambda b: b.last_id, default=None)


class ProducerIdManager:
    """Hands out the ids of its current block, claiming the next block when it runs out."""

    def __init__(self, store: ProducerIdBlockStore, broker_id: int) -> None:
        self._store = store
        self._broker_id = broker_id
        self._block: ProducerIdBlock | None = None
        self._next_id = 0
        self._claiming: asyncio.Future | None = None

    async def generate(self) -> int:
        """A producer id no one got before. Raises what the store raised when a new block was
        needed and could not be claimed."""
        while self._block is None or self._next_id > self._block.last_id:
            if self._claiming is None:
                self._claiming = asyncio.ensure_future(self._claim())
            await asyncio.shield(self._claiming)
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    async def _claim(self) -> None:
        try:
            block = await self._store.claim_block(self._broker_id)
            log.info("claimed producer ids %d to %d", block.first_id, block.last_id)
            self._block, self._next_id = block, block.first_id
        finally:
            self._claiming = None
