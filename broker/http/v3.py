"""REST Proxy API v3: clusters, topics, partitions, and producing records.

GET /v3/clusters[/{cluster_id}], GET|POST /v3/clusters/{id}/topics, GET|DELETE
/v3/clusters/{id}/topics/{topic}, GET /v3/clusters/{id}/topics/{topic}/partitions, and POST
/v3/clusters/{id}/topics/{topic}/records. Topics are read with Metadata, created with
CreateTopics and deleted with DeleteTopics, records produced with Produce, all through the
broker's handlers. An unknown cluster id is 404 (error_code 404), an unknown topic 404 with
40403, a topic that exists 400 with 40002, as the proxy answers.

Producing: a record is {"partition_id", "headers": [{"name", "value" (base64)}], "key",
"value", "timestamp"}, key and value each {"type": "BINARY" (base64 data) | "JSON" | "STRING",
"data"}. A body of known length holding one record is answered with its result and an HTTP status
reflecting it. Several records one after another (concatenated or whitespace between them), or
a chunked body (the proxy's streamed mode), are answered 200 with one JSON result per record, one
per line, in order, each carrying its error_code (200, or the error's) and its partition_id,
offset and timestamp or its message. A record that is no record is answered 400 in its place; a
body that is not JSON from some point on, or a record over http.max.request.bytes, is answered
400 (413) there and the answer ends, as the proxy's does. The records of a body of known length
(at most http.max.request.bytes) are produced together, one batch per partition. A chunked body
is read as it arrives, for as long as the client writes: the records that arrived together are
produced together and each result is written as soon as its record is acknowledged
(broker/http/json_stream.py finds the records). ?acks=all|1|0
(logway's addition: the proxy takes acks from its producer config; default all).
"""

import base64
import binascii
import datetime
import functools
import json
import uuid

from aiohttp import web
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Header

from broker.http.context import API, PRINCIPAL
from broker.http.errors import RestError, kafka_error
from broker.http.json_stream import JsonValues
from broker.http.produce import OutRecord, parse_acks

ADMIN_TIMEOUT = datetime.timedelta(seconds=30)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v3/clusters", list_clusters)
    app.router.add_get("/v3/clusters/{cluster}", get_cluster)
    app.router.add_get("/v3/clusters/{cluster}/topics", list_topics)
    app.router.add_post("/v3/clusters/{cluster}/topics", create_topic)
    app.router.add_get("/v3/clusters/{cluster}/topics/{topic}", get_topic)
    app.router.add_delete("/v3/clusters/{cluster}/topics/{topic}", delete_topic)
    app.router.add_get("/v3/clusters/{cluster}/topics/{topic}/partitions", list_partitions)
    app.router.add_post("/v3/clusters/{cluster}/topics/{topic}/records", produce_records)


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}/v3/clusters"


def _check_cluster(request: web.Request) -> str:
    cluster_id = request.app[API].broker.cluster_id
    if request.match_info["cluster"] != cluster_id:
        raise RestError(404, 404, f"Cluster {request.match_info['cluster']} cannot be found.")
    return cluster_id


def _cluster(request: web.Request, metadata) -> dict:
    cluster_id = metadata.cluster_id
    url = f"{_base(request)}/{cluster_id}"
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": url, "resource_name": f"crn:///kafka={cluster_id}"},
        "cluster_id": cluster_id,
        "controller": {"related": f"{url}/brokers/{metadata.controller_id}"},
        "acls": {"related": f"{url}/acls"},
        "brokers": {"related": f"{url}/brokers"},
        "broker_configs": {"related": f"{url}/broker-configs"},
        "consumer_groups": {"related": f"{url}/consumer-groups"},
        "topics": {"related": f"{url}/topics"},
        "partition_reassignments": {"related": f"{url}/topics/-/partitions/-/reassignment"},
    }


def _topic(request: web.Request, cluster_id: str, topic) -> dict:
    url = f"{_base(request)}/{cluster_id}/topics/{topic.name}"
    return {
        "kind": "KafkaTopic",
        "metadata": {"self": url, "resource_name": f"crn:///kafka={cluster_id}/topic={topic.name}"},
        "cluster_id": cluster_id,
        "topic_name": topic.name,
        "is_internal": topic.is_internal,
        "replication_factor": len(topic.partitions[0].replica_nodes) if topic.partitions else 0,
        "partitions_count": len(topic.partitions),
        "partitions": {"related": f"{url}/partitions"},
        "configs": {"related": f"{url}/configs"},
        "partition_reassignments": {"related": f"{url}/partitions/-/reassignment"},
        "authorized_operations": [],
    }


def _partition(request: web.Request, cluster_id: str, topic: str, partition) -> dict:
    url = f"{_base(request)}/{cluster_id}/topics/{topic}/partitions/{partition.partition_index}"
    return {
        "kind": "KafkaPartition",
        "metadata": {
            "self": url,
            "resource_name": f"crn:///kafka={cluster_id}/topic={topic}/partition={partition.partition_index}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition.partition_index,
        "leader": {"related": f"{url}/replicas/{partition.leader_id}"},
        "replicas": {"related": f"{url}/replicas"},
        "reassignment": {"related": f"{url}/reassignment"},
    }


def _list(request: web.Request, kind: str, data: list) -> dict:
    return {"kind": kind, "metadata": {"self": str(request.url), "next": None}, "data": data}


async def _metadata(request: web.Request, topics: tuple[str, ...] | None):
    api = request.app[API]
    wanted = None if topics is None else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    return await api.loopback.send(
        ApiKey.METADATA, 12,
        MetadataRequest(topics=wanted, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
        request[PRINCIPAL],
    )


async def _one_topic(request: web.Request, name: str):
    metadata = await _metadata(request, (name,))
    topic = metadata.topics[0]
    if topic.error_code != ErrorCode.none:
        raise kafka_error(topic.error_code)
    return topic


async def list_clusters(request: web.Request) -> web.Response:
    metadata = await _metadata(request, ())
    return web.json_response(_list(request, "KafkaClusterList", [_cluster(request, metadata)]))


async def get_cluster(request: web.Request) -> web.Response:
    _check_cluster(request)
    return web.json_response(_cluster(request, await _metadata(request, ())))


async def list_topics(request: web.Request) -> web.Response:
    cluster_id = _check_cluster(request)
    metadata = await _metadata(request, None)
    topics = sorted((t for t in metadata.topics if t.error_code == ErrorCode.none), key=lambda t: t.name)
    return web.json_response(_list(request, "KafkaTopicList", [_topic(request, cluster_id, t) for t in topics]))


async def get_topic(request: web.Request) -> web.Response:
    cluster_id = _check_cluster(request)
    topic = await _one_topic(request, request.match_info["topic"])
    return web.json_response(_topic(request, cluster_id, topic))


async def list_partitions(request: web.Request) -> web.Response:
    cluster_id = _check_cluster(request)
    topic = await _one_topic(request, request.match_info["topic"])
    partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
    return web.json_response(
        _list(request, "KafkaPartitionList", [_partition(request, cluster_id, topic.name, p) for p in partitions])
    )


async def read_json(request: web.Request):
    """The body as JSON; 400 (error_code 400) when it is not JSON, as the proxy's
    JsonParseExceptionMapper answers."""
    body = await request.read()
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RestError(400, 400, f"Unexpected character or malformed JSON: {exc}") from None


def unprocessable(message: str) -> RestError:
    return RestError(422, 422, message)


async def create_topic(request: web.Request) -> web.Response:
    cluster_id = _check_cluster(request)
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("topic_name"), str):
        raise unprocessable("topic_name: must not be null")
    partitions = body.get("partitions_count", -1)
    replication = body.get("replication_factor", -1)
    configs = body.get("configs") or []
    if not isinstance(partitions, int) or not isinstance(replication, int) or not isinstance(configs, list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) for c in configs
    ):
        raise unprocessable("partitions_count and replication_factor must be integers, configs [{name, value}]")
    name = body["topic_name"]
    creatable = CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication, assignments=(),
        configs=tuple(CreatableTopicConfig(name=c["name"], value=c.get("value")) for c in configs),
    )
    api = request.app[API]
    response = await api.loopback.send(
        ApiKey.CREATE_TOPICS, 7,
        CreateTopicsRequest(topics=(creatable,), timeout=ADMIN_TIMEOUT, validate_only=bool(body.get("validate_only"))),
        request[PRINCIPAL],
    )
    result = response.topics[0]
    if result.error_code == ErrorCode.topic_already_exists:
        raise RestError(400, 40002, f"Topic '{name}' already exists.")
    if result.error_code != ErrorCode.none:
        raise kafka_error(result.error_code, result.error_message)
    topic = await _one_topic(request, name)
    return web.json_response(_topic(request, cluster_id, topic), status=201)


async def delete_topic(request: web.Request) -> web.Response:
    _check_cluster(request)
    api = request.app[API]
    response = await api.loopback.send(
        ApiKey.DELETE_TOPICS, 6,
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name=request.match_info["topic"], topic_id=uuid.UUID(int=0)),),
            timeout=ADMIN_TIMEOUT,
        ),
        request[PRINCIPAL],
    )
    result = response.responses[0]
    if result.error_code != ErrorCode.none:
        raise kafka_error(result.error_code, result.error_message)
    return web.Response(status=204)


# --- producing


def _data(field: str, part) -> tuple[bytes | None, str | None]:
    """(bytes, type) of a key or value; RestError 400 when malformed."""
    if part is None:
        return None, None
    if not isinstance(part, dict):
        raise RestError(400, 400, f"{field} must be an object with type and data")
    kind = part.get("type", "JSON" if "data" in part else None)
    data = part.get("data")
    if kind == "BINARY":
        if data is None:
            return None, kind
        try:
            return base64.b64decode(data, validate=True), kind
        except (binascii.Error, TypeError, ValueError):
            raise RestError(400, 400, f"{field}.data is not valid base64") from None
    if kind == "STRING":
        if data is not None and not isinstance(data, str):
            raise RestError(400, 400, f"{field}.data must be a string")
        return (None if data is None else data.encode()), kind
    if kind == "JSON":
        return (None if data is None else json.dumps(data, separators=(",", ":")).encode()), kind
    raise RestError(400, 400, f"{field}.type {kind!r} is not served: BINARY, JSON or STRING")


def _timestamp(text) -> int | None:
    if text is None:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise RestError(400, 400, f"timestamp {text!r} is not an ISO 8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _out_record(value) -> tuple[OutRecord, dict]:
    if not isinstance(value, dict):
        raise RestError(400, 400, "a record must be a JSON object")
    partition = value.get("partition_id")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise RestError(400, 400, "partition_id must be an integer")
    headers = []
    for header in value.get("headers") or []:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise RestError(400, 400, "headers must be [{name, value (base64)}]")
        header_value, _ = _data("header", {"type": "BINARY", "data": header.get("value")})
        headers.append(Header(header["name"], header_value))
    key, key_type = _data("key", value.get("key"))
    data, value_type = _data("value", value.get("value"))
    sizes = {}
    if key_type is not None:
        sizes["key"] = {"type": key_type, "size": len(key or b"")}
    if value_type is not None:
        sizes["value"] = {"type": value_type, "size": len(data or b"")}
    return OutRecord(partition, key, data, tuple(headers), _timestamp(value.get("timestamp"))), sizes


@functools.lru_cache(maxsize=256)  # the records of a request mostly share one timestamp
def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def _error(error: RestError) -> tuple[int, dict]:
    return error.status, {"error_code": error.error_code, "message": error.message}


async def _results(request: web.Request, values: list, acks: int, answering: bool) -> list[tuple[int, dict]]:
    """Each value's (status, result), its records produced together (one batch per partition).
    A produce refused as a whole (an unknown topic ...) raises RestError, or once `answering`
    (results of the request already written) is each record's error."""
    api = request.app[API]
    topic = request.match_info["topic"]
    results: list[tuple[int, dict] | None] = []
    records, places, sizes = [], [], []
    for value in values:
        try:
            if isinstance(value, RestError):
                raise value
            record, size = _out_record(value)
        except RestError as exc:
            results.append(_error(exc))
            continue
        places.append(len(results))
        results.append(None)
        records.append(record)
        sizes.append(size)
    if not records:
        return results
    try:
        outcomes = await api.producer.produce(topic, records, request[PRINCIPAL], acks)
    except RestError as exc:
        if not answering:
            raise
        for place in places:
            results[place] = _error(exc)
        return results
    for place, outcome, size in zip(places, outcomes, sizes):
        if outcome.error != ErrorCode.none:
            results[place] = _error(kafka_error(outcome.error, outcome.message))
            continue
        results[place] = (200, {
            "error_code": 200, "cluster_id": api.broker.cluster_id, "topic_name": topic,
            "partition_id": outcome.partition, "offset": outcome.offset,
            "timestamp": _iso(outcome.timestamp_ms) if outcome.timestamp_ms >= 0 else None, **size,
        })
    return results


def _lines(results: list[tuple[int, dict]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for _, r in results)


async def produce_records(request: web.Request) -> web.StreamResponse:
    _check_cluster(request)
    acks = parse_acks(request.query.get("acks"))
    if request.content_length is None:
        return await _produce_streamed(request, acks)
    # A body of known length (at most http.max.request.bytes, app.py) is complete on the
    # client's side: its records go in one produce, one batch per partition.
    values = JsonValues(request.app[API].max_request_bytes)
    body = await request.read()
    found = values.feed(body) + values.end()
    if not found:
        raise RestError(400, 400, "no record in the request body")
    results = await _results(request, found, acks, answering=False)
    if len(results) == 1:
        status, result = results[0]
        return web.json_response(result, status=status)
    return web.Response(text=_lines(results), content_type="application/json")


async def _produce_streamed(request: web.Request, acks: int) -> web.StreamResponse:
    """A chunked body, which may go on as long as the client writes: its records are produced
    as they arrive, those that arrived together in one produce, and each result is written as
    soon as its record is acknowledged. The next piece of the body is read once the last one's
    records are acknowledged, so a client writing faster than the broker appends is held back
    by TCP (aiohttp stops reading the socket when its buffer is full), not buffered."""
    max_bytes = request.app[API].max_request_bytes
    values = JsonValues(max_bytes)
    response: web.StreamResponse | None = None
    try:
        while not values.ended:
            data = await request.content.read(max_bytes)  # what has arrived, waiting only for the first byte
            found = values.feed(data) if data else values.end()
            if found:
                # Until the first result is written, a produce refused as a whole (an unknown
                # topic ...) is the request's status, as for a body of known length.
                results = await _results(request, found, acks, answering=response is not None)
                if response is None:
                    response = web.StreamResponse(headers={"Content-Type": "application/json"})
                    await response.prepare(request)
                await response.write(_lines(results).encode())
            if not data:
                break
    except ConnectionResetError:
        # The client went away mid-stream, which is how a client that streams while it runs
        # stops: the records that arrived whole are produced, there is no one left to answer (aiohttp
        # drops this response quietly), and it is no server error to log.
        return response or web.Response()
    if response is None:
        raise RestError(400, 400, "no record in the request body")
    await response.write_eof()
    return response
