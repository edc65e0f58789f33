"""broker.zk_producer_ids against a real ZooKeeper: blocks follow one another across brokers, in
Kafka's JSON, and racing claims never get the same block."""

import asyncio


from broker.zk_producer_ids import ZkProducerIdBlockStore
from coordinator.producer_ids import ProducerIdBlock, decode_block
from replication import znodes
from replication.zk import ZkClient


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_claims_follow_the_latest_block_in_zookeeper(zookeeper):
    async def scenario():
        client = ZkClient(zookeeper.connect_string + "/sequence", 6000, connection_timeout_ms=30_000)
        await client.start()
        try:
            store = ZkProducerIdBlockStore(client)
            assert await store.claim_block(1) == ProducerIdBlock(1, 0)
            assert await store.claim_block(2) == ProducerIdBlock(2, 1000)
            data, _ = await client.get(znodes.LATEST_PRODUCER_ID_BLOCK)
            assert decode_block(data) == ProducerIdBlock(2, 1000)
            assert b'"block_start":"1000"' in data and b'"block_end":"1999"' in data
        finally:
            await client.close()

    run(scenario())


def test_an_empty_znode_means_no_block_yet_and_racing_claims_get_distinct_blocks(zookeeper):
    async def scenario():
        client = ZkClient(zookeeper.connect_string + "/race", 6000, connection_timeout_ms=30_000)
        await client.start()
        try:
            await client.ensure_path(znodes.LATEST_PRODUCER_ID_BLOCK)  # as a persistent path
            stores = [ZkProducerIdBlockStore(client) for _ in range(4)]
            blocks = await asyncio.gather(*(store.claim_block(n) for n, store in enumerate(stores)))
            assert sorted(block.first_id for block in blocks) == [0, 1000, 2000, 3000]
        finally:
            await client.close()

    run(scenario())
