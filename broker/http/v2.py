"""REST Proxy API v2: producing to a topic and consumer instances, binary and JSON formats.

POST /topics/{topic} with Content-Type application/vnd.kafka.binary.v2+json (keys and values
base64) or application/vnd.kafka.json.v2+json (any JSON, stored as its compact text), body
{"records": [{"key", "value", "partition"}]}, answers {"key_schema_id": null,
"value_schema_id": null, "offsets": [{"partition", "offset", "error_code", "error"}]}; an
unknown topic is 404 with error_code 40401, a partition the topic lacks 404 with 40402, another
content type 415. ?acks= as in v3.

Consumer instances (broker/http/consumers.py): POST /consumers/{group} {"name", "format",
"auto.offset.reset", "auto.commit.enable"} answers {"instance_id", "base_uri"} (409 with 40902
for a name in use); under /consumers/{group}/instances/{name}: POST|GET|DELETE subscription
({"topics": [...]}), GET records?timeout=&max_bytes= (Accept must name the instance's format,
else 406 with 40601), POST offsets ({"offsets": [{"topic", "partition", "offset"}]}, offset
being the last record consumed, so offset + 1 is committed, as the proxy does; no body: commit
what was handed out), GET offsets ({"partitions": [{"topic", "partition"}]}), DELETE the
instance. An unknown or expired instance is 404 with 40403. Bad JSON is 400 (error_code 400),
a body of the wrong shape 422 (422, or 42204 for a bad consumer setting).
"""

import base64
import binascii
import json

from aiohttp import web

from protocol.errors import ErrorCode

from broker.http.context import API, PRINCIPAL
from broker.http.errors import (
    CONSUMER_FORMAT_MISMATCH,
    INVALID_CONSUMER_CONFIG,
    PARTITION_NOT_FOUND,
    TOPIC_NOT_FOUND,
    RestError,
    kafka_error,
)
from broker.http.produce import OutRecord, parse_acks
from broker.http.v3 import read_json, unprocessable

FORMATS = {
    "application/vnd.kafka.binary.v2+json": "binary",
    "application/vnd.kafka.json.v2+json": "json",
}
CONTENT_TYPES = {format: content_type for content_type, format in FORMATS.items()}
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # the proxy's consumer.request.max.bytes


def add_routes(app: web.Application) -> None:
    app.router.add_post("/topics/{topic}", produce)
    app.router.add_post("/consumers/{group}", create_consumer)
    base = "/consumers/{group}/instances/{name}"
    app.router.add_delete(base, delete_consumer)
    app.router.add_post(base + "/subscription", subscribe)
    app.router.add_get(base + "/subscription", subscription)
    app.router.add_delete(base + "/subscription", unsubscribe)
    app.router.add_get(base + "/records", records)
    app.router.add_post(base + "/offsets", commit_offsets)
    app.router.add_get(base + "/offsets", committed_offsets)


def _encode(format: str, field: str, value) -> bytes | None:
    if value is None:
        return None
    if format == "json":
        return json.dumps(value, separators=(",", ":")).encode()
    if not isinstance(value, str):
        raise unprocessable(f"{field} must be a base64 string in the binary format")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise unprocessable(f"{field} is not valid base64") from None


def _decode(format: str, data: bytes | None):
    if data is None:
        return None
    if format == "binary":
        return base64.b64encode(data).decode()
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


async def produce(request: web.Request) -> web.Response:
    format = FORMATS.get(request.content_type)
    if format is None:
        raise RestError(415, 415, f"HTTP 415 Unsupported Media Type: {request.content_type} (served: "
                        f"{', '.join(FORMATS)})")
    acks = parse_acks(request.query.get("acks"))
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("records"), list) or not body["records"]:
        raise unprocessable("records may not be empty")
    out = []
    for record in body["records"]:
        if not isinstance(record, dict):
            raise unprocessable("each record must be an object")
        partition = record.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise unprocessable("partition must be an integer")
        out.append(OutRecord(partition, _encode(format, "key", record.get("key")),
                             _encode(format, "value", record.get("value"))))
    api = request.app[API]
    try:
        outcomes = await api.producer.produce(request.match_info["topic"], out, request[PRINCIPAL], acks)
    except RestError as exc:
        if exc.error_code == 40403:
            raise RestError(404, TOPIC_NOT_FOUND, "Topic not found.") from None
        raise
    if any(o.error == ErrorCode.unknown_topic_or_partition for o in outcomes):
        raise RestError(404, PARTITION_NOT_FOUND, "Partition not found.")
    offsets = []
    for outcome in outcomes:
        if outcome.error == ErrorCode.none:
            offsets.append({"partition": outcome.partition, "offset": outcome.offset, "error_code": None, "error": None})
        else:
            error = kafka_error(outcome.error, outcome.message)
            offsets.append({"partition": outcome.partition, "offset": None, "error_code": error.error_code,
                            "error": error.message})
    return web.json_response(
        {"key_schema_id": None, "value_schema_id": None, "offsets": offsets},
        content_type="application/vnd.kafka.v2+json",
    )


def _instance(request: web.Request):
    return request.app[API].consumers.get(
        request.match_info["group"], request.match_info["name"], request[PRINCIPAL]
    )


async def create_consumer(request: web.Request) -> web.Response:
    body = await read_json(request) if request.can_read_body else {}
    if not isinstance(body, dict):
        raise unprocessable("the body must be an object")
    format = body.get("format", "binary")
    reset = body.get("auto.offset.reset", "latest")
    auto_commit = str(body.get("auto.commit.enable", "true")).lower()
    if format not in ("binary", "json"):
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"Invalid format type {format}: binary or json are served")
    if reset not in ("earliest", "latest"):
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"Invalid auto.offset.reset {reset}: earliest or latest")
    if auto_commit not in ("true", "false"):
        raise RestError(422, INVALID_CONSUMER_CONFIG, f"Invalid auto.commit.enable {auto_commit}")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise unprocessable("name must be a non-empty string")
    group = request.match_info["group"]
    instance = request.app[API].consumers.create(group, name, request[PRINCIPAL], format, reset,
                                                   auto_commit == "true")
    base_uri = f"{request.scheme}://{request.host}/consumers/{group}/instances/{instance.name}"
    return web.json_response({"instance_id": instance.name, "base_uri": base_uri},
                             content_type="application/vnd.kafka.v2+json")


async def delete_consumer(request: web.Request) -> web.Response:
    await request.app[API].consumers.delete(
        request.match_info["group"], request.match_info["name"], request[PRINCIPAL]
    )
    return web.Response(status=204)


async def subscribe(request: web.Request) -> web.Response:
    instance = _instance(request)
    body = await read_json(request)
    topics = body.get("topics") if isinstance(body, dict) else None
    if isinstance(body, dict) and "topic_pattern" in body:
        raise unprocessable("topic_pattern subscriptions are not served: name the topics")
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise unprocessable("topics may not be empty")
    instance.subscribe(tuple(sorted(set(topics))))
    return web.Response(status=204)


async def subscription(request: web.Request) -> web.Response:
    return web.json_response({"topics": list(_instance(request).topics)}, content_type="application/vnd.kafka.v2+json")


async def unsubscribe(request: web.Request) -> web.Response:
    _instance(request).subscribe(())
    return web.Response(status=204)


def _int_query(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise RestError(400, 400, f"{name} must be an integer") from None


async def records(request: web.Request) -> web.Response:
    instance = _instance(request)
    accepted = [part.split(";")[0].strip() for part in request.headers.get("Accept", "").split(",")]
    wanted = CONTENT_TYPES[instance.format]
    if wanted not in accepted and "*/*" not in accepted and "application/*" not in accepted:
        raise RestError(406, CONSUMER_FORMAT_MISMATCH, "The requested embedded data format does not match the "
                        "deserializer for this consumer instance")
    api = request.app[API]
    timeout = _int_query(request, "timeout", api.consumers.request_timeout_ms)
    timeout = max(0, min(timeout, api.consumers.request_timeout_ms))
    max_bytes = max(1, _int_query(request, "max_bytes", DEFAULT_MAX_BYTES))
    fetched = await instance.poll(timeout, max_bytes)
    return web.json_response(
        [
            {"topic": f.topic, "key": _decode(instance.format, f.record.key),
             "value": _decode(instance.format, f.record.value), "partition": f.partition, "offset": f.record.offset}
            for f in fetched
        ],
        content_type=wanted,
    )


async def commit_offsets(request: web.Request) -> web.Response:
    instance = _instance(request)
    body = await request.read()
    if body.strip():
        try:
            parsed = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RestError(400, 400, f"Unexpected character or malformed JSON: {exc}") from None
        entries = parsed.get("offsets") if isinstance(parsed, dict) else None
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
            and isinstance(e.get("offset"), int) for e in entries
        ):
            raise unprocessable("offsets must be [{topic, partition, offset}]")
        offsets = {(e["topic"], e["partition"]): e["offset"] + 1 for e in entries}
    else:
        offsets = dict(instance.uncommitted)
    if offsets:
        await instance.commit(offsets)
    return web.Response(status=200)


async def committed_offsets(request: web.Request) -> web.Response:
    instance = _instance(request)
    body = await read_json(request)
    entries = body.get("partitions") if isinstance(body, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int) for e in entries
    ):
        raise unprocessable("partitions must be [{topic, partition}]")
    wanted = [(e["topic"], e["partition"]) for e in entries]
    found = await instance.committed(wanted) if wanted else {}
    return web.json_response(
        {"offsets": [
            {"topic": t, "partition": p, "offset": found.get((t, p), (-1, None))[0],
             "metadata": found.get((t, p), (-1, None))[1] or ""}
            for t, p in wanted
        ]},
        content_type="application/vnd.kafka.v2+json",
    )
