"""Client quotas on three brokers and a real ZooKeeper: a quota altered through one broker is in
ZooKeeper in Kafka's layout and is applied by the others at once (the /config/changes
notification), and its removal too."""

import datetime
import json
import socket

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, wait_formed
from tests.cluster.harness import kazoo_client, wait_until
from tests.kafka_wire import decode_response, encode_request, read_frame


def on(cluster, broker_id: int, api_key: ApiKey, version: int, request, client_id: str = "test"):
    broker = cluster.broker(broker_id)
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        sock.sendall(encode_request(api_key, version, request, client_id=client_id))
        return decode_response(api_key, version, read_frame(sock))


def alter(cluster, broker_id: int, value: float | None) -> None:
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type="client-id", entity_name="metered"),),
                ops=(OpData(key="producer_byte_rate", value=value or 0.0, remove=value is None),),
            ),
        ),
        validate_only=False,
    )
    response = on(cluster, broker_id, ApiKey.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]


def described(cluster, broker_id: int) -> dict[str, float]:
    request = DescribeClientQuotasRequest(
        components=(ComponentData(entity_type="client-id", match_type=0, match="metered"),), strict=False
    )
    response = on(cluster, broker_id, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, request)
    return {v.key: v.value for entry in response.entries for v in entry.values}


def produce_throttle_ms(cluster, broker_id: int) -> float:
    """The throttle time of a 20 kB produce from client-id "metered" (to a topic that does not
    exist: the request's bytes count whatever its answer)."""
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"x" * 20_000)])
    request = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name="no-such-topic", partition_data=(PartitionProduceData(index=0, records=batch),)),),
    )
    response = on(cluster, broker_id, ApiKey.PRODUCE, 9, request, client_id="metered")
    return response.throttle_time.total_seconds() * 1000


def test_a_quota_altered_on_one_broker_applies_on_every_broker(cluster_factory):
    cluster = cluster_factory(overrides={**SMALL_INDEXES, "auto.create.topics.enable": "false"})
    wait_formed(cluster)
    alter(cluster, 1, 1000)
    with kazoo_client(cluster.zookeeper_connect) as zk:
        data, _ = zk.get("/config/clients/metered")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1000"}}
        changes = [json.loads(zk.get(f"/config/changes/{name}")[0]) for name in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "clients/metered"} in changes
    for broker_id in (2, 3):
        wait_until(lambda: described(cluster, broker_id) == {"producer_byte_rate": 1000.0}, TIMEOUT_S,
                   f"broker {broker_id} has the quota")
        # 20 kB against 1000 B/s over the 10 s minimum span: throttled about 10 s.
        assert produce_throttle_ms(cluster, broker_id) > 9_000

    alter(cluster, 3, None)
    wait_until(lambda: described(cluster, 2) == {}, TIMEOUT_S, "broker 2 saw the removal")
    assert produce_throttle_ms(cluster, 2) == 0
