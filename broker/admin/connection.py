"""The admin client: one BrokerClient (replication/broker_client.py, with its TLS and SASL) per
broker it talks to, and the API version of each request chosen from the broker's ApiVersions.

    async with Admin("127.0.0.1:9092", command_config.load(path)) as admin:
        metadata = await admin.metadata(["orders"])
        response = await admin.send(DescribeConfigsRequest(...), node=metadata.controller_id)

Requests are built as the newest version this tool is written against (a kio class: its
`__version__`); `send` sends the highest version both sides know (min of that and the broker's
max, which must not be below the broker's min) and returns the response adapted up to the
written version, fields the older version lacks taking their defaults. That is how it talks to
Kafka as well as logway, and to older brokers.

Bootstrap: the first address of --bootstrap-server that answers ApiVersions; then the broker
ids and addresses come from Metadata. Failures are `AdminError`, whose message carries Kafka's
error name (UNKNOWN_TOPIC_OR_PARTITION, ...) when a broker answered one.
"""

import asyncio
from collections.abc import Iterable
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from broker.admin.command_config import ClientSettings
from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from replication.broker_client import BrokerClient, BrokerClientError

SOFTWARE_NAME = "logway-admin"
SOFTWARE_VERSION = "0.1.0"
# Errors worth a retry: the state is moving (a coordinator loading, a leader changing).
RETRIABLE = frozenset({
    ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.not_controller,
    ErrorCode.request_timed_out,
})
# How long a request to the controller is retried through a controller move or a dead broker
# still in the metadata (Kafka's admin client: default.api.timeout.ms, retry.backoff.ms).
API_TIMEOUT_S = 60.0
RETRY_BACKOFF_S = 0.1
GROUP_KEY, TRANSACTION_KEY = 0, 1
LATEST, EARLIEST = -1, -2


class AdminError(Exception):
    """The command failed; the message says why (with Kafka's error name when a broker gave one)."""


class UnreachableError(AdminError):
    """A broker could not be reached, or went away during a request."""


class UsageError(Exception):
    """Flags that do not make a command (Kafka's tools print their usage and exit)."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (its Errors enum: UNKNOWN_TOPIC_OR_PARTITION)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{code}"


def failure(code: int, what: str, message: str | None = None) -> AdminError:
    detail = f": {message}" if message else ""
    return AdminError(f"{what}: {error_name(code)}{detail}")


def check(code: int, what: str, message: str | None = None) -> None:
    """AdminError for a non-zero error code."""
    if code != ErrorCode.none:
        raise failure(code, what, message)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise AdminError(f"Invalid url in bootstrap.servers: {address}")
    return host.strip("[]"), int(port)


class _Node:
    def __init__(self, client: BrokerClient, versions: dict[int, tuple[int, int]]) -> None:
        self.client, self.versions = client, versions


class Admin:
    def __init__(self, bootstrap: str, settings: ClientSettings) -> None:
        self._bootstrap = [parse_address(a) for a in bootstrap.split(",") if a.strip()]
        if not self._bootstrap:
            raise AdminError("--bootstrap-server is empty")
        self.settings = settings
        self._nodes: dict[tuple[str, int], _Node] = {}
        self._addresses: dict[int, tuple[str, int]] = {}
        self._any: tuple[str, int] | None = None

    async def __aenter__(self) -> "Admin":
        await self._connect_bootstrap()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        for node in self._nodes.values():
            await node.client.close()
        self._nodes.clear()

    async def _connect_bootstrap(self) -> None:
        errors = []
        for address in self._bootstrap:
            try:
                await self._node(address)
            except AdminError as exc:
                errors.append(str(exc))
                continue
            self._any = address
            await self.metadata([])  # learns the brokers' ids and addresses
            return
        raise AdminError("cannot reach any bootstrap server: " + "; ".join(errors))

    async def _node(self, address: tuple[str, int]) -> _Node:
        node = self._nodes.get(address)
        if node is not None:
            return node
        client = BrokerClient(
            address[0], address[1], self.settings.client_id,
            connect_timeout_s=self.settings.request_timeout_s, request_timeout_s=self.settings.request_timeout_s,
            ssl_context=self.settings.ssl_context, sasl=self.settings.sasl,
        )
        versions = await self._api_versions(client)
        node = self._nodes[address] = _Node(client, versions)
        return node

    async def _api_versions(self, client: BrokerClient) -> dict[int, tuple[int, int]]:
        try:
            try:
                response = await client.send(
                    ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
                )
            except BrokerClientError:
                response = None  # a broker without v3 answers in v0's layout, unreadable as v3
            if response is None or response.error_code == ErrorCode.unsupported_version:
                response = await client.send(ApiKey.API_VERSIONS, 0, ApiVersionsRequestV0())
        except BrokerClientError as exc:
            await client.close()
            raise UnreachableError(str(exc)) from None
        check(response.error_code, f"ApiVersions to {client.address}")
        return {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}

    async def api_versions(self, node_id: int | None = None) -> dict[int, tuple[int, int]]:
        return (await self._node(self._address(node_id))).versions

    def _address(self, node_id: int | None) -> tuple[str, int]:
        if node_id is None:
            return self._any
        try:
            return self._addresses[node_id]
        except KeyError:
            raise AdminError(f"broker {node_id} is not in the cluster's metadata") from None

    @property
    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        return dict(self._addresses)

    async def send(self, request: Any, node: int | None = None, min_version: int = 0) -> Any:
        """`request` (a kio entity of the version written against) to broker `node` (None: any),
        sent as the highest version both know; the response adapted up to that version."""
        api_key, written = request.__api_key__, request.__version__
        address = self._address(node)
        target = await self._node(address)
        supported = target.versions.get(api_key)
        name = api_name(api_key)
        if supported is None:
            raise AdminError(f"{name}: UNSUPPORTED_VERSION: the broker at {address[0]}:{address[1]} does not serve {name}")
        version = min(written, supported[1])
        if version < max(supported[0], min_version):
            raise AdminError(
                f"{name}: UNSUPPORTED_VERSION: the broker at {address[0]}:{address[1]} serves versions "
                f"{supported[0]}-{supported[1]}, logway-admin needs {max(min_version, 0)}-{written}"
            )
        try:
            response = await target.client.send(api_key, version, request)
        except BrokerClientError as exc:
            await self._forget(address)
            raise UnreachableError(f"{name}: {exc}") from None
        if version == written:
            return response
        return schemas.adapt(response, schemas.response_type(api_key, written))

    def version_for(self, api_key: int, written: int, node: int | None = None) -> int:
        """The version `send` would use for `api_key` on `node` (already connected)."""
        supported = self._nodes[self._address(node)].versions.get(api_key, (0, -1))
        return min(written, supported[1])

    async def metadata(self, topics: Iterable[str] | None = None) -> Any:
        """Metadata of `topics` (None: all topics; []: none, only brokers and controller)."""
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        response = await self.send(request, min_version=1)
        self._addresses = {b.node_id: (b.host, b.port) for b in response.brokers}
        return response

    async def _forget(self, address: tuple[str, int]) -> None:
        """Drop the connection to `address`: the next request connects again."""
        node = self._nodes.pop(address, None)
        if node is not None:
            await node.client.close()

    async def send_to_controller(self, request: Any, min_version: int = 0) -> Any:
        """`send` to the controller, found again and retried while it cannot be reached or the
        cluster has none (a controller that died is still named by the metadata for a while)."""
        deadline = asyncio.get_running_loop().time() + API_TIMEOUT_S
        while True:
            try:
                return await self.send(request, node=await self.controller(), min_version=min_version)
            except UnreachableError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def controller(self) -> int:
        controller = (await self.metadata([])).controller_id
        if controller < 0:
            raise UnreachableError("the cluster has no active controller: NOT_CONTROLLER")
        return controller

    async def leaders(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The leader of each partition (-1: none); AdminError for a topic that does not exist."""
        partitions = list(partitions)
        metadata = await self.metadata(sorted({t for t, _ in partitions}))
        leaders = {}
        for topic in metadata.topics:
            check(topic.error_code, f"Metadata of topic {topic.name}")
            for partition in topic.partitions:
                leaders[(topic.name, partition.partition_index)] = partition.leader_id
        for partition in partitions:
            if partition not in leaders:
                raise AdminError(f"{partition[0]}-{partition[1]}: UNKNOWN_TOPIC_OR_PARTITION")
        return leaders

    async def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets of each partition at `timestamp` (LATEST -1, EARLIEST -2, or a time in ms)
        from its leader: the offset, -1 where no record is that recent."""
        wanted = set(partitions)
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for partition, leader in (await self.leaders(wanted)).items():
            if partition in wanted:
                by_leader.setdefault(leader, []).append(partition)
        offsets = {}
        for leader, owned in by_leader.items():
            if leader < 0:
                raise AdminError(f"{owned[0][0]}-{owned[0][1]}: LEADER_NOT_AVAILABLE")
            topics: dict[str, list[int]] = {}
            for topic, partition in owned:
                topics.setdefault(topic, []).append(partition)
            request = ListOffsetsRequest(
                replica_id=-1, isolation_level=0,
                topics=tuple(
                    ListOffsetsTopic(name=t, partitions=tuple(
                        ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in ps
                    )) for t, ps in topics.items()
                ),
            )
            deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
            while True:
                response = await self.send(request, node=leader, min_version=1)
                # A leader just elected whose high watermark lags its epoch's start: retriable,
                # asked again as Kafka's admin client does.
                lagging = any(p.error_code == ErrorCode.offset_not_available for t in response.topics for p in t.partitions)
                if not lagging or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            for topic in response.topics:
                for partition in topic.partitions:
                    check(partition.error_code, f"ListOffsets of {topic.name}-{partition.partition_index}")
                    offsets[(topic.name, partition.partition_index)] = partition.offset
        return offsets

    async def coordinator(self, key: str, key_type: int = GROUP_KEY) -> int:
        """The node id of the coordinator of a group (or a transactional id), retrying while
        none is available, for up to the request timeout."""
        deadline = asyncio.get_running_loop().time() + self.settings.request_timeout_s
        while True:
            request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=(key,))
            if self.version_for(ApiKey.FIND_COORDINATOR, 4) >= 4:
                response = await self.send(request)
                answer = response.coordinators[0]
                code, message, node = answer.error_code, answer.error_message, answer.node_id
            else:
                from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as Older

                response = await self.send(Older(key=key, key_type=key_type))
                code, message, node = response.error_code, response.error_message, response.node_id
            if code == ErrorCode.none:
                await self.metadata([])  # the coordinator's address
                return node
            if code not in RETRIABLE or asyncio.get_running_loop().time() > deadline:
                raise failure(code, f"FindCoordinator for {key}", message)
            await asyncio.sleep(0.2)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (DescribeLogDirs), from kio's table of Kafka's message definitions."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"UNKNOWN({api_key})"
    return "".join(part.capitalize() for part in name.split("_"))


def newest_known_version(api_key: int) -> int | None:
    """The newest version of an API whose schema this tool has (kio's or protocol.legacy's)."""
    versions = schema_name_map.get(api_key_map.get(api_key), {})
    return max(versions) if versions else None
