"""Client quota stores: ZooKeeper in Kafka's layout (against a real ZooKeeper), and the
standalone file in the log dirs."""

import asyncio
import json

from broker.security.quota_store import FileQuotaStore, QuotaConfigs, ZkQuotaStore, altered, entity_path
from broker.security.quotas import DEFAULT, ClientQuotas, QuotaEntity
from replication.zk import ZkClient


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def connected(zookeeper, chroot: str) -> ZkClient:
    client = ZkClient(zookeeper.connect_string + chroot, 6000, connection_timeout_ms=30_000)
    await client.start()
    await client.ensure_path("/config/changes")
    return client


async def node(client: ZkClient, path: str) -> dict | None:
    found = await client.get_or_none(path)
    return None if found is None else json.loads(found[0])


def test_entity_paths_are_kafkas_with_sanitized_names():
    assert entity_path(QuotaEntity("a b*", None)) == "users/a%20b%2A"
    assert entity_path(QuotaEntity(None, DEFAULT)) == "clients/<default>"
    assert entity_path(QuotaEntity(DEFAULT, "app/1")) == "users/<default>/clients/app%2F1"


def test_a_change_is_written_as_kafka_writes_it_and_announced(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/written")
        try:
            store = ZkQuotaStore(client)
            config = await store.replace(
                QuotaEntity(None, "app"), lambda current: altered(current, [("producer_byte_rate", 1024.0, False)])
            )
            assert config == {"producer_byte_rate": "1024"}
            assert await node(client, "/config/clients/app") == {"version": 1, "config": {"producer_byte_rate": "1024"}}
            [change] = await client.get_children("/config/changes")
            assert change.startswith("config_change_")
            assert await node(client, f"/config/changes/{change}") == {"version": 2, "entity_path": "clients/app"}
        finally:
            await client.close()

    run(scenario())


def test_a_user_quota_keeps_the_scram_credentials_of_the_node(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/scram")
        try:
            credentials = {"SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a,server_key=b,iterations=4096"}
            await client.create(
                "/config/users/alice", json.dumps({"version": 1, "config": credentials}).encode(), makepath=True
            )
            store = ZkQuotaStore(client)
            alice = QuotaEntity("alice", None)
            await store.replace(alice, lambda c: altered(c, [("consumer_byte_rate", 10.0, False)]))
            assert (await node(client, "/config/users/alice"))["config"] == {**credentials, "consumer_byte_rate": "10"}
            await store.replace(alice, lambda c: altered(c, [("consumer_byte_rate", 0.0, True)]))
            assert (await node(client, "/config/users/alice"))["config"] == credentials
        finally:
            await client.close()

    run(scenario())


def test_an_emptied_user_client_node_goes_with_its_empty_parents(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/clean")
        try:
            store = ZkQuotaStore(client)
            entity = QuotaEntity("bob", "app")
            await store.replace(entity, lambda c: altered(c, [("request_percentage", 20.0, False)]))
            assert await node(client, "/config/users/bob/clients/app") == {
                "version": 1, "config": {"request_percentage": "20.0"}
            }
            await store.replace(entity, lambda c: altered(c, [("request_percentage", 0.0, True)]))
            assert await client.exists("/config/users/bob") is None
        finally:
            await client.close()

    run(scenario())


def test_every_entity_kafka_wrote_is_loaded_and_one_is_reloaded_on_notice(zookeeper):
    async def scenario():
        client = await connected(zookeeper, "/load")
        try:
            # As kafka-configs --zookeeper writes them.
            for path, config in {
                "/config/users/a%20b%2A": {"producer_byte_rate": "100", "SCRAM-SHA-512": "x"},
                "/config/users/<default>/clients/<default>": {"request_percentage": "50.0"},
                "/config/clients/app": {"consumer_byte_rate": "300"},
            }.items():
                await client.create(path, json.dumps({"version": 1, "config": config}).encode(), makepath=True)
            quotas = ClientQuotas()
            configs = QuotaConfigs(quotas, ZkQuotaStore(client))
            await configs.load()
            assert quotas.configs == {
                QuotaEntity("a b*", None): {"producer_byte_rate": 100.0},
                QuotaEntity(DEFAULT, DEFAULT): {"request_percentage": 50.0},
                QuotaEntity(None, "app"): {"consumer_byte_rate": 300.0},
            }
            await client.set("/config/clients/app", json.dumps({"version": 1, "config": {}}).encode())
            await configs.reload("clients/app")
            assert QuotaEntity(None, "app") not in quotas.configs
            assert quotas.fetch.quota("u", "app") is None
        finally:
            await client.close()

    run(scenario())


def test_the_file_store_keeps_the_newest_copy_of_every_log_dir(tmp_path):
    async def scenario():
        dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
        store = FileQuotaStore(dirs)
        await store.load()
        await store.write(QuotaEntity(None, "app"), {"producer_byte_rate": "5"})
        await store.write(QuotaEntity("u", None), {"consumer_byte_rate": "6"})
        store.close()
        # One log dir missed the last write (it was offline): the other's newer copy wins.
        (tmp_path / "a" / "logway-client-quotas.json").write_text(
            json.dumps({"version": 1, "generation": 1, "entities": {"clients/app": {"producer_byte_rate": "5"}}})
        )
        reread = FileQuotaStore(dirs)
        assert await reread.load() == {
            QuotaEntity(None, "app"): {"producer_byte_rate": "5"},
            QuotaEntity("u", None): {"consumer_byte_rate": "6"},
        }
        reread.close()

    run(scenario())
