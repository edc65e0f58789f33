"""broker.http.v2: produce in the binary and JSON formats, and consumer instances."""

import asyncio
import base64
import json

from tests.unit.broker.http.conftest import http_broker

BINARY = "application/vnd.kafka.binary.v2+json"
JSON = "application/vnd.kafka.json.v2+json"


def run(tmp_path, scenario, extra=None):
    async def main():
        async with http_broker(tmp_path, extra) as (broker, session, base):
            return await scenario(broker, session, base)

    return asyncio.run(main())


async def answer(response):
    return response.status, await response.json(content_type=None)


async def post(session, url, body, content_type):
    return await answer(await session.post(url, data=json.dumps(body), headers={"Content-Type": content_type}))


def test_binary_and_json_records_are_produced_with_their_offsets(tmp_path):
    async def scenario(broker, session, base):
        await broker.topics.create("t", 2, {})
        binary = await post(session, f"{base}/topics/t", {"records": [
            {"key": base64.b64encode(b"k").decode(), "value": base64.b64encode(b"v").decode(), "partition": 1}]}, BINARY)
        as_json = await post(session, f"{base}/topics/t", {"records": [{"value": {"a": [1]}, "partition": 1}]}, JSON)
        return binary, as_json

    binary, as_json = run(tmp_path, scenario)
    assert binary == (200, {"key_schema_id": None, "value_schema_id": None, "offsets": [
        {"partition": 1, "offset": 0, "error_code": None, "error": None}]})
    assert as_json[1]["offsets"] == [{"partition": 1, "offset": 1, "error_code": None, "error": None}]


def test_produce_errors_have_the_proxys_codes(tmp_path):
    async def scenario(broker, session, base):
        await broker.topics.create("t", 1, {})
        return [
            await post(session, f"{base}/topics/missing", {"records": [{"value": 1}]}, JSON),
            await post(session, f"{base}/topics/t", {"records": [{"value": 1, "partition": 3}]}, JSON),
            await post(session, f"{base}/topics/t", {"records": []}, JSON),
            await post(session, f"{base}/topics/t", {"records": [{"value": "%%%"}]}, BINARY),
            await post(session, f"{base}/topics/t", {"records": [{"value": 1}]}, "application/vnd.kafka.avro.v2+json"),
            await answer(await session.post(f"{base}/topics/t", data=b"{", headers={"Content-Type": JSON})),
        ]

    codes = [(status, body["error_code"]) for status, body in run(tmp_path, scenario)]
    assert codes == [(404, 40401), (404, 40402), (422, 422), (422, 422), (415, 415), (400, 400)]


def test_a_consumer_instance_reads_commits_and_is_deleted(tmp_path):
    async def scenario(broker, session, base):
        await broker.topics.create("t", 2, {})
        await post(session, f"{base}/topics/t", {"records": [{"value": i, "partition": i % 2} for i in range(4)]}, JSON)
        created = await post(session, f"{base}/consumers/g", {"name": "c", "format": "json",
                                                              "auto.offset.reset": "earliest",
                                                              "auto.commit.enable": "false"}, "application/vnd.kafka.v2+json")
        instance = f"{base}/consumers/g/instances/c"
        duplicate = await post(session, f"{base}/consumers/g", {"name": "c"}, "application/vnd.kafka.v2+json")
        subscribed = (await session.post(f"{instance}/subscription", json={"topics": ["t"]})).status
        subscription = await answer(await session.get(f"{instance}/subscription"))
        records = []
        for _ in range(20):  # bounded: each poll waits at most its timeout
            status, got = await answer(await session.get(f"{instance}/records?timeout=500", headers={"Accept": JSON}))
            records += got
            if len(records) >= 4:
                break
        wrong_format = await answer(await session.get(f"{instance}/records", headers={"Accept": BINARY}))
        committed = (await session.post(f"{instance}/offsets", json={"offsets": [
            {"topic": "t", "partition": 0, "offset": 1}]})).status
        offsets = await answer(await session.get(f"{instance}/offsets", json={"partitions": [
            {"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]}))
        deleted = (await session.delete(instance)).status
        after = await answer(await session.get(f"{instance}/records", headers={"Accept": JSON}))
        return created, duplicate, subscribed, subscription, records, wrong_format, committed, offsets, deleted, after

    created, duplicate, subscribed, subscription, records, wrong_format, committed, offsets, deleted, after = run(
        tmp_path, scenario)
    assert created[0] == 200 and created[1]["instance_id"] == "c"
    assert created[1]["base_uri"].endswith("/consumers/g/instances/c")
    assert (duplicate[0], duplicate[1]["error_code"]) == (409, 40902)
    assert (subscribed, subscription) == (204, (200, {"topics": ["t"]}))
    assert sorted((r["partition"], r["offset"], r["value"]) for r in records) == [(0, 0, 0), (0, 1, 2), (1, 0, 1), (1, 1, 3)]
    assert (wrong_format[0], wrong_format[1]["error_code"]) == (406, 40601)
    assert committed == 200
    # The proxy commits the offset after the one named (the next to read); nothing was
    # committed for partition 1 (auto.commit.enable=false).
    assert offsets[1]["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 2, "metadata": ""},
        {"topic": "t", "partition": 1, "offset": -1, "metadata": ""},
    ]
    assert deleted == 204
    assert (after[0], after[1]["error_code"]) == (404, 40403)


def test_an_idle_instance_expires_after_http_consumer_instance_timeout_ms(tmp_path):
    async def scenario(broker, session, base):
        await post(session, f"{base}/consumers/g", {"name": "c"}, "application/vnd.kafka.v2+json")
        before = (await session.get(f"{base}/consumers/g/instances/c/subscription")).status
        for _ in range(50):  # bounded: the reaper runs every 0.1 s here
            if not broker.http_api.consumers._instances:  # noqa: SLF001
                break
            await asyncio.sleep(0.1)
        after = await answer(await session.get(f"{base}/consumers/g/instances/c/subscription"))
        return before, after

    before, after = run(tmp_path, scenario, {"http.consumer.instance.timeout.ms": "200"})
    assert before == 200
    assert after == (404, {"error_code": 40403, "message": "Consumer instance not found."})


def test_bad_consumer_settings_are_422_with_42204(tmp_path):
    async def scenario(broker, session, base):
        return [
            await post(session, f"{base}/consumers/g", {"format": "avro"}, "application/vnd.kafka.v2+json"),
            await post(session, f"{base}/consumers/g", {"auto.offset.reset": "none"}, "application/vnd.kafka.v2+json"),
        ]

    assert [(s, b["error_code"]) for s, b in run(tmp_path, scenario)] == [(422, 42204), (422, 42204)]


def test_get_records_is_a_long_poll_answered_when_a_record_arrives_or_at_its_timeout(tmp_path):
    # The proxy's GET records waits up to its timeout for records (here through Fetch's
    # max_wait): an empty poll takes its timeout, and a poll parked at the log end is answered
    # as soon as a record is produced, well before its timeout.
    async def scenario(broker, session, base):
        await broker.topics.create("t", 1, {})
        await post(session, f"{base}/consumers/g", {"name": "c", "format": "json", "auto.offset.reset": "latest",
                                                   "auto.commit.enable": "false"}, "application/vnd.kafka.v2+json")
        instance = f"{base}/consumers/g/instances/c"
        await session.post(f"{instance}/subscription", json={"topics": ["t"]})
        # The first polls join the group and find the position (the log end).
        for _ in range(20):  # bounded
            await answer(await session.get(f"{instance}/records?timeout=200", headers={"Accept": JSON}))
            if broker.http_api.consumers._instances[("g", "c")].assignment.get(("t", 0)) is not None:  # noqa: SLF001
                break
        loop = asyncio.get_running_loop()
        started = loop.time()
        empty = await answer(await session.get(f"{instance}/records?timeout=800", headers={"Accept": JSON}))
        empty_s = loop.time() - started

        async def produce_later():
            await asyncio.sleep(0.5)
            await post(session, f"{base}/topics/t", {"records": [{"value": "late"}]}, JSON)

        producing = asyncio.ensure_future(produce_later())
        started = loop.time()
        parked = await answer(await session.get(f"{instance}/records?timeout=4000", headers={"Accept": JSON}))
        parked_s = loop.time() - started
        await producing
        return empty, empty_s, parked, parked_s

    empty, empty_s, parked, parked_s = run(tmp_path, scenario, {"http.consumer.request.timeout.ms": "5000"})
    assert empty == (200, [])
    assert 0.7 <= empty_s < 3, empty_s
    assert parked[0] == 200 and [r["value"] for r in parked[1]] == ["late"]
    assert 0.4 <= parked_s < 3, parked_s
