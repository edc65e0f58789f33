import asyncio
import json
import os

import pytest

from coordinator.producer_ids import (
    BLOCK_FILE,
    FileProducerIdBlockStore,
    ProducerIdBlock,
    ProducerIdManager,
    decode_block,
    encode_block,
)


def run(coro):
    return asyncio.run(coro)


def test_blocks_are_encoded_in_kafkas_znode_layout():
    data = encode_block(ProducerIdBlock(3, 2000))
    assert json.loads(data) == {"version": 1, "broker": 3, "block_start": "2000", "block_end": "2999"}
    assert decode_block(data) == ProducerIdBlock(3, 2000, 1000)
    # As Kafka's ProducerIdBlockZNode writes it.
    assert decode_block(b'{"version":1,"broker":1,"block_start":"5","block_end":"9"}') == ProducerIdBlock(1, 5, 5)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"broker":1}', b'{"broker":1,"block_start":"9","block_end":"5"}', b'{"broker":1,"block_start":"x","block_end":"5"}'],
)
def test_undecodable_blocks(data):
    with pytest.raises(ValueError):
        decode_block(data)


def test_each_claim_follows_the_latest_block_even_across_restarts(tmp_path):
    first = FileProducerIdBlockStore([str(tmp_path)])
    assert run(first.claim_block(0)) == ProducerIdBlock(0, 0)
    assert run(first.claim_block(0)) == ProducerIdBlock(0, 1000)
    restarted = FileProducerIdBlockStore([str(tmp_path)])
    assert run(restarted.claim_block(0)) == ProducerIdBlock(0, 2000)
    assert decode_block((tmp_path / BLOCK_FILE).read_bytes()) == ProducerIdBlock(0, 2000)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_the_newest_copy_over_the_log_dirs_wins_and_a_lost_disk_loses_nothing(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    store = FileProducerIdBlockStore([str(d) for d in dirs])
    run(store.claim_block(0))
    run(store.claim_block(0))
    (dirs[0] / BLOCK_FILE).write_bytes(encode_block(ProducerIdBlock(0, 0)))  # a stale disk
    assert run(store.claim_block(0)).first_id == 2000
    (dirs[1] / BLOCK_FILE).unlink()  # a replaced disk
    (dirs[0] / BLOCK_FILE).write_bytes(b"garbage")  # and a damaged one
    assert run(FileProducerIdBlockStore([str(d) for d in dirs]).claim_block(0)).first_id == 0


def test_a_claim_needs_one_dir_that_takes_the_block(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    bad.write_text("a file where a directory should be")
    assert run(FileProducerIdBlockStore([str(bad), str(good)]).claim_block(0)).first_id == 0
    assert (good / BLOCK_FILE).exists()
    with pytest.raises(OSError):
        run(FileProducerIdBlockStore([str(bad)]).claim_block(0))


class CountingStore:
    """A store that gives consecutive small blocks and counts claims; fails when told."""

    def __init__(self, size=3):
        self.size, self.claims, self.fail = size, 0, False

    async def claim_block(self, broker_id):
        await asyncio.sleep(0)
        if self.fail:
            raise OSError("disk failed")
        self.claims += 1
        return ProducerIdBlock(broker_id, 100 * self.claims, self.size)


def test_the_manager_hands_out_a_block_then_claims_the_next_once_for_all_waiters():
    async def scenario():
        store = CountingStore()
        manager = ProducerIdManager(store, broker_id=1)
        first = [await manager.generate() for _ in range(3)]
        together = await asyncio.gather(*(manager.generate() for _ in range(5)))
        return first, sorted(together), store.claims

    first, together, claims = run(scenario())
    assert first == [100, 101, 102]
    assert together == [200, 201, 202, 300, 301]
    assert claims == 3


def test_a_failed_claim_is_raised_and_the_next_call_claims_again():
    async def scenario():
        store = CountingStore(size=1)
        manager = ProducerIdManager(store, broker_id=0)
        store.fail = True
        with pytest.raises(OSError):
            await manager.generate()
        store.fail = False
        return await manager.generate()

    assert run(scenario()) == 100
