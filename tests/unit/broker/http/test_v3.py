"""broker.http.v3: clusters, topics, partitions and records over HTTP, with the proxy's codes."""

import asyncio
import base64
import json

from protocol.records import iter_records
from storage.topic_partition import TopicPartition
from tests.unit.broker.http.conftest import http_broker


def run(tmp_path, scenario, extra=None):
    async def main():
        async with http_broker(tmp_path, extra) as (broker, session, base):
            return await scenario(broker, session, f"{base}/v3/clusters/{broker.cluster_id}")

    return asyncio.run(main())


async def answer(response):
    return response.status, await response.json(content_type=None)


def test_topics_are_created_listed_described_and_deleted(tmp_path):
    async def scenario(broker, session, cluster):
        created = await answer(await session.post(f"{cluster}/topics", json={
            "topic_name": "orders", "partitions_count": 3, "replication_factor": 1,
            "configs": [{"name": "cleanup.policy", "value": "compact"}]}))
        again = await answer(await session.post(f"{cluster}/topics", json={"topic_name": "orders"}))
        listed = await answer(await session.get(f"{cluster}/topics"))
        partitions = await answer(await session.get(f"{cluster}/topics/orders/partitions"))
        configs = broker.topics.get("orders").configs
        deleted = (await session.delete(f"{cluster}/topics/orders")).status
        gone = await answer(await session.get(f"{cluster}/topics/orders"))
        return created, again, listed, partitions, configs, deleted, gone

    created, again, listed, partitions, configs, deleted, gone = run(tmp_path, scenario)
    assert created[0] == 201
    assert (created[1]["kind"], created[1]["topic_name"], created[1]["partitions_count"]) == ("KafkaTopic", "orders", 3)
    assert again == (400, {"error_code": 40002, "message": "Topic 'orders' already exists."})
    assert [t["topic_name"] for t in listed[1]["data"]] == ["orders"]
    assert [p["partition_id"] for p in partitions[1]["data"]] == [0, 1, 2]
    assert configs == {"cleanup.policy": "compact"}
    assert deleted == 204
    assert gone == (404, {"error_code": 40403, "message": "This server does not host this topic-partition."})


def test_an_unknown_cluster_id_is_404(tmp_path):
    async def scenario(broker, session, cluster):
        return await answer(await session.get(cluster.rsplit("/", 1)[0] + "/nope/topics"))

    assert run(tmp_path, scenario) == (404, {"error_code": 404, "message": "Cluster nope cannot be found."})


def test_one_record_is_answered_with_its_offset_and_stored_with_key_value_headers_and_timestamp(tmp_path):
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 2, {})
        result = await answer(await session.post(f"{cluster}/topics/t/records", json={
            "partition_id": 1,
            "headers": [{"name": "h", "value": base64.b64encode(b"hv").decode()}],
            "key": {"type": "BINARY", "data": base64.b64encode(b"\x00k").decode()},
            "value": {"type": "JSON", "data": {"n": 1}},
            "timestamp": "2024-01-02T03:04:05.678Z",
        }))
        log = broker.replica_manager.get_partition(TopicPartition("t", 1)).log
        return result, list(iter_records(log.read(0, 1 << 20, log.log_end_offset, True).read()))

    (status, body), records = run(tmp_path, scenario)
    assert status == 200
    assert {k: body[k] for k in ("error_code", "topic_name", "partition_id", "offset", "timestamp")} == {
        "error_code": 200, "topic_name": "t", "partition_id": 1, "offset": 0, "timestamp": "2024-01-02T03:04:05.678Z"}
    assert (body["key"], body["value"]) == ({"type": "BINARY", "size": 2}, {"type": "JSON", "size": 7})
    [record] = records
    assert (record.key, record.value, record.timestamp) == (b"\x00k", b'{"n":1}', 1704164645678)
    assert [(h.key, h.value) for h in record.headers] == [("h", b"hv")]


def test_a_streamed_request_gets_one_result_per_record_with_errors_in_place(tmp_path):
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        body = "\n".join([
            json.dumps({"value": {"type": "STRING", "data": "a"}}),
            json.dumps({"value": {"type": "BINARY", "data": "not base64!"}}),
            json.dumps({"partition_id": 5, "value": {"type": "STRING", "data": "b"}}),
            json.dumps({"value": {"type": "STRING", "data": "c"}}),
        ])
        response = await session.post(f"{cluster}/topics/t/records", data=body)
        return response.status, [json.loads(line) for line in (await response.text()).splitlines()]

    status, results = run(tmp_path, scenario)
    assert status == 200
    assert [(r["error_code"], r.get("offset")) for r in results] == [(200, 0), (400, None), (40403, None), (200, 1)]


def test_bad_json_is_400_and_an_unknown_topic_404(tmp_path):
    async def scenario(broker, session, cluster):
        bad = await answer(await session.post(f"{cluster}/topics", data=b"{nope"))
        unknown = await answer(await session.post(f"{cluster}/topics/missing/records", json={"value": None}))
        return bad, unknown

    bad, unknown = run(tmp_path, scenario)
    assert (bad[0], bad[1]["error_code"]) == (400, 400)
    assert unknown == (404, {"error_code": 40403, "message": "This server does not host this topic-partition."})


def test_a_body_over_http_max_request_bytes_is_413(tmp_path):
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        record = json.dumps({"value": {"type": "STRING", "data": "x" * 2000}})
        return await answer(await session.post(f"{cluster}/topics/t/records", data=record))

    status, body = run(tmp_path, scenario, {"http.max.request.bytes": "1000"})
    assert (status, body["error_code"]) == (413, 413)


def test_acks_zero_is_answered_without_offsets_and_a_bad_acks_is_400(tmp_path):
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        zero = await answer(await session.post(f"{cluster}/topics/t/records?acks=0", json={"value": None}))
        bad = await answer(await session.post(f"{cluster}/topics/t/records?acks=2", json={"value": None}))
        return zero, bad, broker.replica_manager.get_partition(TopicPartition("t", 0)).log.log_end_offset

    zero, bad, end = run(tmp_path, scenario)
    assert (zero[0], zero[1]["offset"], end) == (200, -1, 1)
    assert (bad[0], bad[1]["error_code"]) == (400, 400)


def _record(text: str) -> bytes:
    return json.dumps({"value": {"type": "STRING", "data": text}}).encode()


async def _streamed(session, url, pieces):
    """POST `pieces` as a chunked body, pausing between them; a piece that is None waits (up to
    5 s) for the first result line. (status, result lines, whether that line came before the
    last piece was sent)."""
    first_result = asyncio.Event()
    early = []

    async def body():
        for piece in pieces:
            if piece is None:
                try:
                    await asyncio.wait_for(first_result.wait(), 5)
                except TimeoutError:
                    pass
                early.append(first_result.is_set())
                continue
            yield piece
            await asyncio.sleep(0.05)

    async with session.post(url, data=body(), headers={"Content-Type": "application/json"}) as response:
        lines = []
        while line := await response.content.readline():
            lines.append(json.loads(line))
            first_result.set()
        return response.status, lines, early == [True]


def test_a_chunked_request_is_answered_record_by_record_while_it_is_still_being_sent(tmp_path):
    # The proxy's streamed mode: a client writing records for as long as it runs reads each
    # record's result as soon as the record is written, not when its body ends.
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        first = _record("a")
        pieces = [first[:10], first[10:] + b"\n", None, _record("b") + _record("c"), _record("d")[:7],
                  _record("d")[7:]]
        return await _streamed(session, f"{cluster}/topics/t/records", pieces)

    status, results, early = run(tmp_path, scenario)
    assert early, "no result before the last piece of the body was sent"
    assert status == 200
    assert [(r["error_code"], r["offset"]) for r in results] == [(200, 0), (200, 1), (200, 2), (200, 3)]


def test_a_malformed_record_mid_stream_is_answered_400_in_its_place_and_ends_the_answer(tmp_path):
    # As the proxy's StreamingResponse: a record that is not JSON ends the stream (where the
    # next record starts cannot be known); one that is JSON but no record does not.
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        pieces = [_record("a"), None, b'{"value": 7}\n{"value": {"type": "STRING", "data": tru}}\n', _record("c")]
        answer = await _streamed(session, f"{cluster}/topics/t/records", pieces)
        return answer, broker.replica_manager.get_partition(TopicPartition("t", 0)).log.log_end_offset

    (status, results, early), end = run(tmp_path, scenario)
    assert early and status == 200
    assert [(r["error_code"], r.get("offset")) for r in results] == [(200, 0), (400, None), (400, None)]
    assert results[2]["message"].startswith("Unexpected character or malformed JSON")
    assert end == 1


def test_a_stream_is_bounded_per_record_not_in_total(tmp_path):
    # A stream may go on for ever: http.max.request.bytes bounds each record (what the broker
    # holds of it), and a record over it is 413 in its place, ending the answer.
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})
        pieces = [_record("x" * 200) + b"\n" for _ in range(10)] + [_record("y" * 2000), _record("z")]
        return await _streamed(session, f"{cluster}/topics/t/records", pieces)

    status, results, _ = run(tmp_path, scenario, {"http.max.request.bytes": "1000"})
    assert status == 200
    assert [r["error_code"] for r in results] == [200] * 10 + [413]


def test_a_stream_to_an_unknown_topic_is_404_as_a_request_of_known_length(tmp_path):
    async def scenario(broker, session, cluster):
        return await _streamed(session, f"{cluster}/topics/missing/records", [_record("a")])

    status, results, _ = run(tmp_path, scenario)
    assert status == 404
    assert results == [{"error_code": 40403, "message": "This server does not host this topic-partition."}]


def test_a_client_going_away_mid_stream_is_no_server_error(tmp_path, caplog):
    # How a client that streams for as long as it runs stops: what it sent whole is written.
    async def scenario(broker, session, cluster):
        await broker.topics.create("t", 1, {})

        async def body():
            yield _record("a") + b'{"value": '
            await asyncio.sleep(30)

        response = await session.post(f"{cluster}/topics/t/records", data=body())
        first = json.loads(await response.content.readline())
        response.close()
        await asyncio.sleep(0.5)
        return first, broker.replica_manager.get_partition(TopicPartition("t", 0)).log.log_end_offset

    first, end = run(tmp_path, scenario)
    assert (first["offset"], end) == (0, 1)
    assert not [r for r in caplog.records if r.name.startswith("aiohttp") and r.levelname == "ERROR"]
