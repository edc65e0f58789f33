"""Producer id blocks claimed in ZooKeeper: the `ProducerIdBlockStore` of cluster mode.

The znode /latest_producer_id_block holds the latest block any broker claimed, in Kafka's JSON
(coordinator.producer_ids). A claim reads it and compare-and-sets the next block on the version
read (creates the znode for the first block); a lost race reads again, so no two brokers ever
hold the same block, as Kafka's ZooKeeper-mode ProducerIdManager does. An empty znode (created
as a persistent path) counts as no block yet.
"""

import logging

from coordinator.producer_ids import ProducerIdBlock, decode_block, encode_block
from replication import znodes
from replication.zk import BadVersionError, NodeExistsError, ZkClient

log = logging.getLogger(__name__)


class ZkProducerIdBlockStore:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def claim_block(self, broker_id: int) -> ProducerIdBlock:
        while True:
            found = await self._zk.get_or_none(znodes.LATEST_PRODUCER_ID_BLOCK)
            latest = decode_block(found[0]) if found is not None and found[0] else None
            block = latest.next_block(broker_id) if latest else ProducerIdBlock(broker_id, 0)
            try:
                if found is None:
                    await self._zk.create(znodes.LATEST_PRODUCER_ID_BLOCK, encode_block(block), makepath=True)
                else:
                    await self._zk.set(znodes.LATEST_PRODUCER_ID_BLOCK, encode_block(block), found[1].version)
            except (NodeExistsError, BadVersionError):
                log.info("another broker claimed a producer id block meanwhile; trying the next one")
                continue
            return block
