"""broker.security.acl_store: ACLs in ZooKeeper in Kafka's layout and JSON (against a real
ZooKeeper), change notifications that make every broker's authorizer follow at once, and the
file of standalone mode."""

import asyncio
import json
import os

from broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation as Op,
    AclPermissionType,
    MATCH_ALL,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker.security.acl_store import ACL_FILE, FileAclStore, ZkAclStore, decode_change
from broker.security.authorizer import AclAuthorizer
from broker.session import KafkaPrincipal, Session
from replication.zk import ZkClient
from tests.zookeeper_sessions import expire_session

ALICE = Session("10.0.0.1:5000", "PLAINTEXT", principal=KafkaPrincipal("User", "alice"))
READ = AccessControlEntry("User:alice", "*", Op.READ, AclPermissionType.ALLOW)
TOPIC = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
PREFIXED_GROUP = ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED)
TXN = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def connected_store(connect: str) -> tuple[ZkClient, ZkAclStore]:
    client = ZkClient(connect, 6000)
    await client.start()
    return client, ZkAclStore(client)


async def started(connect: str) -> tuple[ZkClient, AclAuthorizer]:
    client, store = await connected_store(connect)
    authorizer = AclAuthorizer(store)
    await authorizer.start()
    return client, authorizer


async def eventually(condition, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_acls_are_written_in_kafkas_znodes_with_change_notifications(zookeeper):
    async def scenario():
        client, authorizer = await started(zookeeper.connect_string + "/layout")
        try:
            assert await authorizer.create_acls([
                AclBinding(TOPIC, READ), AclBinding(PREFIXED_GROUP, READ._replace(operation=Op.DELETE)), AclBinding(TXN, READ._replace(operation=Op.WRITE)),
            ]) == [None, None, None]
            data, _ = await client.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {
                "version": 1,
                "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}],
            }
            data, _ = await client.get("/kafka-acl-extended/prefixed/Group/app-")
            assert json.loads(data)["acls"][0]["operation"] == "Delete"
            assert await client.exists("/kafka-acl/TransactionalId/tx") is not None
            literal_changes = await client.get_children("/kafka-acl-changes")
            assert all(name.startswith("acl_changes_") for name in literal_changes)
            contents = sorted([(await client.get(f"/kafka-acl-changes/{n}"))[0] for n in literal_changes])
            assert contents == [b"TOPIC:orders", b"TRANSACTIONAL_ID:tx"]
            (extended,) = await client.get_children("/kafka-acl-extended-changes")
            event = json.loads((await client.get(f"/kafka-acl-extended-changes/{extended}"))[0])
            assert event == {"version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}
            # Kafka creates every resource type's parent path
            assert "Cluster" in await client.get_children("/kafka-acl")
        finally:
            await client.close()

    run(scenario())


def test_a_change_made_through_one_broker_reaches_another_at_once(zookeeper):
    async def scenario():
        connect = zookeeper.connect_string + "/two"
        client_a, a = await started(connect)
        client_b, b = await started(connect)
        try:
            assert not b.authorize(ALICE, Op.READ, TOPIC)
            await a.create_acls([AclBinding(TOPIC, READ), AclBinding(PREFIXED_GROUP, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TOPIC))
            await eventually(lambda: b.authorize(ALICE, Op.READ, ResourcePattern(ResourceType.GROUP, "app-1")))
            await a.delete_acls([MATCH_ALL])
            await eventually(lambda: not b.acls(MATCH_ALL))
            # the emptied resources' znodes are gone, as Kafka removes them
            assert await client_a.exists("/kafka-acl/Topic/orders") is None
        finally:
            await client_a.close()
            await client_b.close()

    run(scenario())


def test_acls_written_as_kafka_writes_them_are_loaded(zookeeper):
    async def scenario():
        client = ZkClient(zookeeper.connect_string + "/kafka-written", 6000, connection_timeout_ms=30_000)
        await client.start()
        document = {"version": 1, "acls": [{"principal": "User:*", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}]}
        await client.create("/kafka-acl/Topic/*", json.dumps(document).encode(), makepath=True)
        await client.close()
        client, authorizer = await started(zookeeper.connect_string + "/kafka-written")
        try:
            (binding,) = authorizer.acls(MATCH_ALL)
            assert binding == AclBinding(
                ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                AccessControlEntry("User:*", "10.0.0.1", Op.WRITE, AclPermissionType.DENY),
            )
        finally:
            await client.close()

    run(scenario())


def test_concurrent_creations_on_one_resource_are_all_kept(zookeeper):
    async def scenario():
        connect = zookeeper.connect_string + "/race"
        clients = [await started(connect) for _ in range(3)]
        try:
            entries = [READ._replace(principal=f"User:u{n}") for n in range(3)]
            await asyncio.gather(*(a.create_acls([AclBinding(TOPIC, e)]) for (_, a), e in zip(clients, entries)))
            data, _ = await clients[0][0].get("/kafka-acl/Topic/orders")
            assert {item["principal"] for item in json.loads(data)["acls"]} == {"User:u0", "User:u1", "User:u2"}
        finally:
            for client, _ in clients:
                await client.close()

    run(scenario())


def test_literal_change_notifications_name_the_type_in_any_case():
    assert decode_change("/kafka-acl-changes", b"Topic:a:b") == ResourcePattern(ResourceType.TOPIC, "a:b", PatternType.LITERAL)


def test_the_file_store_keeps_the_newest_generation_in_every_log_dir(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]

    async def scenario():
        store = FileAclStore(dirs)
        assert await store.load() == {}
        await store.update(TOPIC, lambda acls: acls | {READ})
        await store.update(TXN, lambda acls: acls | {READ})
        await store.update(TXN, lambda acls: frozenset())
        return await FileAclStore(dirs).load()

    assert run(scenario()) == {TOPIC: frozenset({READ})}
    generations = [json.load(open(os.path.join(d, ACL_FILE)))["generation"] for d in dirs]
    assert generations == [3, 3]


def test_change_notifications_past_their_expiry_are_deleted_as_they_are_read(zookeeper):
    async def scenario():
        connect = zookeeper.connect_string + "/purge"
        client_a, a = await started(connect)
        client_b, store_b = await connected_store(connect)
        store_b.change_expiration_ms = 0  # every notification read is already old
        b = AclAuthorizer(store_b)
        await b.start()
        try:
            await a.create_acls([AclBinding(TOPIC, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TOPIC))
            await a.create_acls([AclBinding(TXN, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TXN))
            # each read deletes the notifications it finds, past an expiry of 0: at most the newest
            # (created within the same millisecond as the read) is left
            await a.create_acls([AclBinding(TOPIC, READ._replace(operation=Op.WRITE))])
            await eventually(lambda: b.authorize(ALICE, Op.WRITE, TOPIC))
            assert len(await client_a.get_children("/kafka-acl-changes")) <= 1
        finally:
            await client_a.close()
            await client_b.close()

    run(scenario())


def test_after_a_session_expiry_every_acl_is_read_again_and_changes_followed(zookeeper):
    async def scenario():
        connect = zookeeper.connect_string + "/expiry"
        client_a, a = await started(connect)
        client_b, b = await started(connect)
        try:
            await a.create_acls([AclBinding(TOPIC, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TOPIC))
            # removed without a notification: only a full read can tell
            await client_a.delete("/kafka-acl/Topic/orders")
            await asyncio.to_thread(expire_session, zookeeper.connect_string + "/expiry", client_b.session_id)
            await eventually(lambda: not b.authorize(ALICE, Op.READ, TOPIC))
            # and the watches are armed again in the new session
            await a.create_acls([AclBinding(TXN, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TXN))
        finally:
            await client_a.close()
            await client_b.close()

    run(scenario())


def test_a_session_that_expires_while_the_acls_load_is_followed_by_a_load_in_the_new_session(zookeeper):
    """The change watches armed before the expiry went with the session: the load starts over,
    so a change made afterwards still reaches the authorizer."""

    async def scenario():
        connect = zookeeper.connect_string + "/expiry-at-load"
        client_a, a = await started(connect)
        client_b, store = await connected_store(connect)
        read_all = store._read_all
        reads = []

        async def read_all_after_an_expiry_the_first_time():
            reads.append(client_b.session_id[0])
            if len(reads) == 1:
                await asyncio.to_thread(expire_session, connect, client_b.session_id)
            return await read_all()

        store._read_all = read_all_after_an_expiry_the_first_time
        b = AclAuthorizer(store)
        try:
            await b.start()
            await a.create_acls([AclBinding(TOPIC, READ)])
            await eventually(lambda: b.authorize(ALICE, Op.READ, TOPIC))
            return reads
        finally:
            await client_a.close()
            await client_b.close()

    reads = run(scenario())
    assert len(reads) == 2 and reads[0] != reads[1]
