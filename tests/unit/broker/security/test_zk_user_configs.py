"""SCRAM credentials in ZooKeeper (against a real ZooKeeper): Kafka's node and notification,
quota keys of the same node kept, names sanitized as Kafka's Sanitizer does, and every user
read back."""

import asyncio
import json

from broker.security import scram
from broker.security.scram_store import ScramCredentialStore, Upsertion
from broker.security.zk_user_configs import ZkUserConfigs
from replication import znodes
from replication.zk import ZkClient

SALT = b"0123456789abcdef"


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def connected(zookeeper, chroot: str) -> ZkClient:
    client = ZkClient(zookeeper.connect_string + chroot, 6000, connection_timeout_ms=30_000)
    await client.start()
    await client.ensure_path("/config/changes")
    return client


def upsert(user: str, password: str) -> Upsertion:
    salted = scram.salted_password(scram.SCRAM_SHA_512, password, SALT, 4096)
    return Upsertion(user, scram.SCRAM_SHA_512.kafka_type, 4096, SALT, salted)


def test_a_credential_is_written_as_kafka_writes_it_keeping_the_users_quotas(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/scram-write")
        try:
            await client.create(
                "/config/users/alice",
                json.dumps({"version": 1, "config": {"producer_byte_rate": "1024"}}).encode(),
                makepath=True,
            )
            store = ScramCredentialStore(ZkUserConfigs(client))
            await store.load()
            await store.alter([upsert("alice", "alice-secret")], [])
            node = json.loads((await client.get("/config/users/alice"))[0])
            assert node["version"] == 1
            assert node["config"]["producer_byte_rate"] == "1024"
            credential = scram.ScramCredential.from_kafka_string(node["config"]["SCRAM-SHA-512"])
            assert credential == scram.credential_from_password(scram.SCRAM_SHA_512, "alice-secret", 4096, SALT)
            [change] = await client.get_children("/config/changes")
            assert json.loads((await client.get(f"/config/changes/{change}"))[0]) == {
                "version": 2, "entity_path": "users/alice",
            }
        finally:
            await client.close()

    run(scenario())


def test_another_broker_reads_every_user_with_names_as_kafka_sanitizes_them(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/scram-read")
        try:
            await ScramCredentialStore(ZkUserConfigs(client)).alter([upsert("bob smith*", "pw")], [])
            assert await client.get_children("/config/users") == ["bob%20smith%2A"]
            other_broker = ScramCredentialStore(ZkUserConfigs(client))
            await other_broker.load()
            assert other_broker.lookup("bob smith*", scram.SCRAM_SHA_512) is not None
        finally:
            await client.close()

    run(scenario())


def test_kafkas_sanitizer_and_back():
    assert znodes.sanitize("a b*c~d/é") == "a%20b%2Ac%7Ed%2F%C3%A9"
    assert znodes.desanitize("a%20b%2Ac%7Ed%2F%C3%A9") == "a b*c~d/é"
