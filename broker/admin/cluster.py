"""`logway-admin cluster`: what kafka-cluster.sh cluster-id and kafka-broker-api-versions.sh
print, and the brokers and controller.

    logway-admin cluster --bootstrap-server H:P                # describe (the default)
    logway-admin cluster --bootstrap-server H:P cluster-id     # Cluster ID: <id>
    logway-admin cluster --bootstrap-server H:P api-versions   # per broker, as kafka-broker-api-versions.sh

describe prints the cluster id, the controller and one line per broker (id, host:port, rack),
from DescribeCluster where the broker serves it, else from Metadata. api-versions prints each
broker's ApiVersions as Kafka's NodeApiVersions does: `Name(key): min to max [usable: v]`,
usable being the newest version both the broker and this tool's schemas know.
"""

import argparse

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest

from broker.admin.connection import Admin, api_name, check, newest_known_version
from protocol.api_keys import ApiKey


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("action", nargs="?", default="describe", choices=("describe", "cluster-id", "api-versions"))


async def run(args: argparse.Namespace, admin: Admin) -> int:
    if args.action == "api-versions":
        return await _api_versions(admin)
    cluster_id, controller, brokers = await describe(admin)
    if args.action == "cluster-id":
        print(f"Cluster ID: {cluster_id}" if cluster_id else "No cluster ID found. The Kafka version is probably too old.")
        return 0
    print(f"Cluster ID: {cluster_id}")
    print(f"Controller: {controller}")
    print(f"Brokers: {len(brokers)}")
    for broker_id, host, port, rack in brokers:
        print(f"\tid: {broker_id}\taddress: {host}:{port}\track: {rack if rack is not None else 'null'}")
    return 0


async def describe(admin: Admin) -> tuple[str | None, int, list[tuple[int, str, int, str | None]]]:
    """(cluster id, controller id, brokers sorted by id as (id, host, port, rack))."""
    if ApiKey.DESCRIBE_CLUSTER in await admin.api_versions():
        response = await admin.send(
            DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
        )
        check(response.error_code, "DescribeCluster", response.error_message)
        brokers = [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers]
        return response.cluster_id, response.controller_id, sorted(brokers)
    metadata = await admin.metadata([])
    brokers = [(b.node_id, b.host, b.port, b.rack) for b in metadata.brokers]
    return metadata.cluster_id, metadata.controller_id, sorted(brokers)


async def _api_versions(admin: Admin) -> int:
    _, _, brokers = await describe(admin)
    for broker_id, host, port, rack in brokers:
        versions = await admin.api_versions(broker_id)
        print(f"{host}:{port} (id: {broker_id} rack: {rack if rack is not None else 'null'}) -> {format_versions(versions)}")
    return 0


def format_versions(versions: dict[int, tuple[int, int]]) -> str:
    lines = [_version_text(key, *versions[key]) for key in sorted(versions)]
    return "(\n\t" + ",\n\t".join(lines) + "\n)"


def _version_text(api_key: int, minimum: int, maximum: int) -> str:
    name = api_name(api_key)
    label = name if name.startswith("UNKNOWN(") else f"{name}({api_key})"
    text = f"{label}: " + (str(minimum) if minimum == maximum else f"{minimum} to {maximum}")
    newest = newest_known_version(api_key)
    if newest is None:
        return text
    if newest < minimum:
        return text + " [unusable: node too new]"
    return text + f" [usable: {min(newest, maximum)}]"
