"""The broker's CPU per Produce or Fetch request without the socket, in process (issue 19).

    python -m benchmarks.request_cost [--api produce|fetch|tail|replicated|idle-follower|idle-round|wire] [--requests 3000]
                                      [--repeats 15] [--batch-bytes 16384] [--partitions 1000] [--calls]
                                      [--fetch-wait-ms 0] [--instructions]

A standalone broker runs in this process (tests.in_process.running_broker, uvloop) with a
one-partition topic, and one request is handed to `Dispatcher.dispatch` `requests` times in a
row, as a connection would hand it, the response's send time recorded as the connection records
it:
- produce: the wire benchmark's Produce v3 (one batch of 100 B records, about `batch-bytes`
  long, acks=1; the same bytes each time: the broker patches baseOffset in place);
- fetch: a consumer's Fetch v12 (what librdkafka sends) for the newest of 100 one-record
  batches, answered at once with that batch. Its answer's bytes and file region are built, not
  sent.
- tail: a record a time, as the end-to-end workload sends them: a consumer's Fetch v12 for the
  next offset, which waits (librdkafka's 500 ms long poll), started as its connection starts it
  on a later turn of the loop; then a Produce v3 of one 100 B record, which wakes it; the
  Fetch's answer awaited. A "request" here is that pair.
- replicated: a record a time through a follower, as an acks=all producer and the replica
  fetcher exchange them: the partition is led here with a follower (broker 1) in its ISR; the
  follower's Fetch v12 for the next offset (which commits the previous record and waits), the
  previous Produce's answer awaited, then an acks=-1 Produce v3 of one 100 B record, which wakes
  the follower's Fetch, whose answer is awaited. A "request" here is that pair too.
- idle-follower: an idle follower's fetch, as an idle cluster's replica fetchers send it:
  `partitions` empty partitions of one topic led here with a follower (broker 1) in their ISR;
  the follower's Fetch v12 opens a fetch session of all of them, then each request is the next
  incremental fetch of that session (no partition named, max_wait 0), which reads every
  partition of the session and is answered with none. The time per partition is printed too.
- idle-round: both sides of an idle cluster's replication, the leader's and the follower's: the
  same `partitions` led here, and followed by a replica manager of broker 1 in this process (a
  log dir of its own) whose replica fetcher fetches them over a loopback connection
  (replica.fetch.wait.max.ms 0, so that an idle round is answered at once); a "request" is one
  round of that fetcher: its fetch built from every partition it follows, sent through its
  BrokerClient, the leader's read of its session, the answer applied. The time per partition
  is printed too. `--fetch-wait-ms` sets the follower's replica.fetch.wait.max.ms instead: each
  round is then an idle cluster's long poll (Kafka's default is 500 ms), the leader's read, its
  watch of every partition until the wait is up, and its answer; the wait's own time is not CPU
  and is not counted.
- wire: the produce request over a loopback TCP connection to the broker's listener, written
  and its answer read by this same loop (loop.sock_sendall, loop.sock_recv_into): the
  connection's read, framing, back-pressure checks, send and send-time metrics are counted too,
  with the kernel's side of both ends and this client's own few calls (the same in every tree).
Each repetition measures the thread's CPU time (user and system: the append's pwrite included)
per request; the minimum and quartiles over `repeats` repetitions are printed. That covers the
header, parsing, the handler, validation, the append or read, the index, the request metrics and
the response encoding; not reading the socket, framing or sending (benchmarks.run's
wire-produce-16k and end-to-end have those). The cyclic garbage collector is set up as the logway
command sets it up for a broker (broker.heap): the youngest generation's threshold, and what is
alive once the broker and its partitions are set up frozen.

`--calls` also counts the Python function calls one request makes (cProfile; slows that pass
down, its time is not reported).

`--instructions` counts the user-space instructions one request executes instead (valgrind's
callgrind: this program run twice under it, with `repeats` 1 and 3, and the difference divided by
2 x `requests`, so start-up and warm-up cancel out). The count does not move with the machine's
load, where the timings of this shared machine swing by half: it is the measure to compare two
trees by when a change is small. It leaves out the kernel's work (the pwrite, the page cache).
About two minutes at the default counts (the two runs in parallel). To count a compiled build, put
its packages on PYTHONPATH and start with -P (`PYTHONPATH=build/compiled-packages:. python -P -m
benchmarks.request_cost --instructions`, from outside the worktree or not).

Bounded by the request and repetition counts.
"""

import argparse
import asyncio
import cProfile
import pstats
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import uvloop
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from benchmarks import wire
from broker.deferred import Deferred
from broker.heap import LongLivedObjects
from broker.replica_manager import ReplicaManager, ReplicationSettings
from protocol.api_keys import ApiKey
from protocol.primitives import INT32, INT64
from replication.broker_client import BrokerClient
from replication.fetcher import FetcherSettings, ReplicaFetcherManager
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.topic_partition import TopicPartition
from tests.in_process import CLIENT_SESSION, running_broker
from tests.kafka_wire import decode_response, encode_request

_TOPIC = "request-cost"
_WARM_UP = 2000
_TAILED_BATCHES = 100
_FETCH_VERSION = 12
_FOLLOWER = 1
_UNLIKELY_OFFSET = 1 << 40  # found in a request's bytes to patch the offset fetched
_UNLIKELY_EPOCH = 0x7EADBEEF  # found in a request's bytes to patch the session epoch


def _fetch_frame(
    offset: int,
    replica_id: int = -1,
    partitions: int = 1,
    session_id: int = 0,
    session_epoch: int = -1,
    max_wait_ms: int = 500,
    last_fetched_epoch: int = -1,
) -> memoryview:
    """A Fetch v12 frame (without its size) of `offset` in each of `partitions` partitions; an
    incremental fetch (session_epoch > 0) names none."""
    request = FetchRequest(
        replica_id=BrokerId(replica_id),
        max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        max_bytes=i32(52_428_800),
        isolation_level=0,
        session_id=i32(session_id),
        session_epoch=i32(session_epoch),
        topics=() if session_epoch > 0 else (
            FetchTopic(
                topic=TopicName(_TOPIC),
                partitions=tuple(
                    FetchPartition(
                        partition=i32(index),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(last_fetched_epoch),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1_048_576),
                    )
                    for index in range(partitions)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    return memoryview(bytearray(encode_request(ApiKey.FETCH, _FETCH_VERSION, request, client_id="rdkafka")))[4:]


async def measure(
    data_dir: Path,
    requests: int,
    repeats: int,
    batch_bytes: int,
    calls: bool,
    api: str = "produce",
    partitions: int = 1,
    fetch_wait_ms: int = 0,
) -> dict:
    async with running_broker(data_dir / "leader", None) as broker:
        if api in ("replicated", "idle-follower", "idle-round"):
            replicas = (broker.broker_id, _FOLLOWER)
            led = [
                PartitionState(TopicPartition(_TOPIC, index), 1, broker.broker_id, 1, replicas, 0, replicas, is_new=True)
                for index in range(partitions if api in ("idle-follower", "idle-round") else 1)
            ]
            broker.replica_manager.become_leader_or_follower(1, led, {}, broker.broker_id)
        else:
            await broker.topics.create(_TOPIC, 1, {})
        dispatch = broker.dispatcher.dispatch
        session = CLIENT_SESSION
        one_record, _ = wire.make_batch(100, 100)
        append = memoryview(wire.produce_request(_TOPIC, 0, one_record, acks=-1 if api == "replicated" else 1))[4:]
        if api == "replicated":
            frame = _fetch_frame(_UNLIKELY_OFFSET, replica_id=_FOLLOWER)  # patched before each use
            fetch_offset_at = bytes(frame).index(INT64.pack(_UNLIKELY_OFFSET))
            next_offset = 0
            previous_produce: asyncio.Future | None = None
        elif api == "idle-follower":
            # The follower's log is as empty as the leader's, at the leader's epoch.
            epoch = broker.replica_manager.partitions[TopicPartition(_TOPIC, 0)].log.leader_epochs.latest_epoch
            opening = _fetch_frame(0, _FOLLOWER, partitions, session_epoch=0, max_wait_ms=0, last_fetched_epoch=epoch)
            def fetched(frame: memoryview):
                """The decoded answer to a Fetch answered at once (no records: its chunks are bytes)."""
                return decode_response(ApiKey.FETCH, _FETCH_VERSION, b"".join(bytes(c) for c in dispatch(frame, session)))

            opened = fetched(opening)
            failed = [p for t in opened.responses for p in t.partitions if p.error_code != 0]
            if opened.session_id == 0 or failed:
                raise RuntimeError(f"the leader opened no fetch session, or failed {failed[:3]}")
            frame = _fetch_frame(0, _FOLLOWER, session_id=opened.session_id, session_epoch=_UNLIKELY_EPOCH, max_wait_ms=0)
            epoch_at = bytes(frame).index(INT32.pack(_UNLIKELY_EPOCH))
            INT32.pack_into(frame, epoch_at, 1)
            first = fetched(frame)
            if first.error_code != 0 or first.responses:
                raise RuntimeError(f"an idle session's fetch was answered with {first!r:.300}")
            session_epoch = 2
        elif api == "idle-round":
            follower = await _follower_of(data_dir / "follower", broker.broker_id, broker.port, led, fetch_wait_ms)
        elif api in ("produce", "wire"):
            batch, _ = wire.make_batch(100, batch_bytes)
            frame = memoryview(wire.produce_request(_TOPIC, 0, batch))[4:]
        else:
            for _ in range(_TAILED_BATCHES):
                dispatch(append, session)
            frame = _fetch_frame(_TAILED_BATCHES - 1)
            fetch_offset_at = bytes(frame).index(INT64.pack(_TAILED_BATCHES - 1))
            next_offset = _TAILED_BATCHES

        def answered(chunks) -> None:
            if chunks is None or not isinstance(chunks, list):
                raise RuntimeError(f"{api} was not answered: {chunks!r}")
            if session.send_timer is not None:  # as the connection does once the answer is out
                session.send_timer.sent(0.0)
                session.send_timer = None

        loop = asyncio.get_running_loop()
        if api == "wire":
            client = socket.create_connection(("127.0.0.1", broker.port))
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            client.setblocking(False)
            framed = bytes(wire.produce_request(_TOPIC, 0, batch))
            answer = bytearray(1024)

        def waited_for(waiting: object) -> asyncio.Future:
            """The answer of a request left waiting, waited for as its connection waits: a
            Deferred with a callback, a coroutine (a handler of an older tree) as a task."""
            if not isinstance(waiting, Deferred):
                if isinstance(waiting, list) or waiting is None:
                    raise RuntimeError(f"{api}: a request was not left waiting: {waiting!r}")
                return asyncio.ensure_future(waiting)
            done = loop.create_future()
            waiting.when_done(lambda answer: done.set_result(answer.result()))
            return done

        async def serve_one() -> None:
            nonlocal next_offset, previous_produce, session_epoch
            if api == "idle-round":
                await follower.next_round()
                return
            if api == "idle-follower":
                INT32.pack_into(frame, epoch_at, session_epoch)
                answered(dispatch(frame, session))
                session_epoch += 1
                return
            if api == "replicated":
                INT64.pack_into(frame, fetch_offset_at, next_offset)
                follower_fetch = waited_for(dispatch(frame, session))
                if previous_produce is not None:
                    answered(await previous_produce)
                await asyncio.sleep(0)  # the produce comes on a later turn
                previous_produce = waited_for(dispatch(append, session))
                answered(await follower_fetch)
                next_offset += 1
                return
            if api == "wire":
                await loop.sock_sendall(client, framed)
                got = 0
                while got < 4 or got < 4 + int.from_bytes(answer[:4], "big"):
                    received = await loop.sock_recv_into(client, memoryview(answer)[got:])
                    if not received:
                        raise RuntimeError("the broker closed the connection")
                    got += received
                return
            if api != "tail":
                answered(dispatch(frame, session))
                return
            INT64.pack_into(frame, fetch_offset_at, next_offset)
            fetch = waited_for(dispatch(frame, session))
            await asyncio.sleep(0)  # the produce comes on a later turn
            answered(dispatch(append, session))
            answered(await fetch)
            next_offset += 1

        # The collector as the logway command sets it up for a broker (broker.heap).
        collector = LongLivedObjects(loop)
        collector.start()
        try:
            for _ in range(max(_WARM_UP // partitions, 3)):  # about _WARM_UP partition reads in all
                await serve_one()
            per_request = []
            for _ in range(repeats):
                started = time.thread_time()
                for _ in range(requests):
                    await serve_one()
                per_request.append((time.thread_time() - started) / requests * 1e6)
            per_request.sort()
            result = {
                "min_us": per_request[0],
                "q1_us": per_request[len(per_request) // 4],
                "median_us": per_request[len(per_request) // 2],
            }
            if calls:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(requests):
                    await serve_one()
                profile.disable()
                result["python_calls"] = pstats.Stats(profile).total_calls / requests
        finally:
            collector.stop()
        if api == "wire":
            client.close()
        if api == "idle-round":
            await follower.stop()
            # The rounds were the incremental fetches of one session of every partition, or
            # they measured something else (full fetches, say).
            sessions = list(broker.fetch_sessions.sessions.values())
            if len(sessions) != 1 or len(sessions[0].partitions) != partitions or sessions[0].epoch < requests:
                raise RuntimeError(f"the follower's rounds were not one session's fetches of {partitions} partitions")
        return result


class _RoundCountingClient(BrokerClient):
    """The follower's client of the leader: each answered Fetch ends a round of its fetcher."""

    round_done: asyncio.Future | None = None

    async def send(self, api_key: int, version: int, request):
        response = await super().send(api_key, version, request)
        if api_key == ApiKey.FETCH and self.round_done is not None and not self.round_done.done():
            self.round_done.set_result(None)
        return response


class _Follower:
    """Broker 1's replica manager in this process, following `led` from the leader here."""

    def __init__(self, logs: LogManager, replicas: ReplicaManager, client: _RoundCountingClient) -> None:
        self.logs = logs
        self.replicas = replicas
        self.client = client

    async def next_round(self) -> None:
        self.client.round_done = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(self.client.round_done, 30)

    async def stop(self) -> None:
        await self.replicas.shutdown()
        await self.logs.shutdown()


async def _follower_of(
    directory: Path, leader_id: int, leader_port: int, led: list[PartitionState], fetch_wait_ms: int
) -> _Follower:
    """`fetch_wait_ms`: its replica.fetch.wait.max.ms; at 0 an idle round is answered at once,
    not after a long poll."""
    logs = LogManager([str(directory)], lambda topic: LogConfig())
    await logs.startup()
    settings = FetcherSettings(wait_max_ms=fetch_wait_ms)
    replicas = ReplicaManager(logs, _FOLLOWER, ReplicationSettings(fetcher=settings))
    clients: list[_RoundCountingClient] = []

    def client_of(source: LeaderEndpoint, client_id: str) -> BrokerClient:
        client = _RoundCountingClient(source.host, source.port, client_id, 10, 30)
        clients.append(client)
        return client

    replicas.fetchers = ReplicaFetcherManager(replicas, _FOLLOWER, settings, client_factory=client_of)
    source = LeaderEndpoint(leader_id, "127.0.0.1", leader_port)
    replicas.become_leader_or_follower(1, led, {leader_id: source}, _FOLLOWER)
    deadline = time.monotonic() + 30
    while not clients:
        if time.monotonic() > deadline:
            raise RuntimeError("the follower started no fetcher")
        await asyncio.sleep(0.01)
    return _Follower(logs, replicas, clients[0])


def counted_command(
    api: str, requests: int, repeats: int, batch_bytes: int, partitions: int = 1, fetch_wait_ms: int = 0
) -> list[str]:
    """This program as one callgrind run starts it. -P is passed on: started with it and
    PYTHONPATH (a compiled build's packages), the run counts those packages, not the worktree's
    pure-Python ones, which the working directory would otherwise put first."""
    return [
        sys.executable, *(["-P"] if sys.flags.safe_path else []),
        "-m", "benchmarks.request_cost", "--api", api, "--requests", str(requests),
        "--repeats", str(repeats), "--batch-bytes", str(batch_bytes), "--partitions", str(partitions),
        "--fetch-wait-ms", str(fetch_wait_ms),
    ]


def instructions_per_request(api: str, requests: int, batch_bytes: int, partitions: int, fetch_wait_ms: int) -> float:
    """User-space instructions per request, from two callgrind runs of this program."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind (apt install valgrind)")
    with tempfile.TemporaryDirectory(prefix="logway-request-cost-") as scratch:
        runs = {
            repeats: subprocess.Popen(
                [
                    valgrind, "--tool=callgrind", f"--callgrind-out-file={scratch}/callgrind.{repeats}",
                    *counted_command(api, requests, repeats, batch_bytes, partitions, fetch_wait_ms),
                ],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            for repeats in (1, 3)
        }
        collected = {}
        for repeats, run in runs.items():
            _, errors = run.communicate()
            found = re.search(r"Collected : (\d+)", errors)
            if run.returncode != 0 or found is None:
                raise SystemExit(f"the callgrind run failed:\n{errors[-2000:]}")
            collected[repeats] = int(found.group(1))
    return (collected[3] - collected[1]) / (2 * requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--api", choices=("produce", "fetch", "tail", "replicated", "idle-follower", "idle-round", "wire"), default="produce"
    )
    parser.add_argument("--requests", type=int, default=3000, help="requests per repetition")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024, help="the produced batch's size")
    parser.add_argument("--partitions", type=int, default=1000, help="the idle follower's partitions")
    parser.add_argument(
        "--fetch-wait-ms", type=int, default=0, help="idle-round: the follower's replica.fetch.wait.max.ms"
    )
    parser.add_argument("--calls", action="store_true", help="also count Python calls per request")
    parser.add_argument("--instructions", action="store_true", help="count instructions per request instead")
    args = parser.parse_args()
    what = {
        "produce": f"Produce v3, one {args.batch_bytes // 1024} KiB batch",
        "fetch": f"Fetch v{_FETCH_VERSION} of the newest one-record batch",
        "tail": f"A record a time: a waiting Fetch v{_FETCH_VERSION} woken by a one-record Produce v3",
        "replicated": f"A record a time through a follower: an acks=all Produce v3 committed by the follower's Fetch v{_FETCH_VERSION}",
        "idle-follower": f"An idle follower's incremental Fetch v{_FETCH_VERSION} of {args.partitions} partitions",
        "idle-round": f"An idle replica fetcher's round of {args.partitions} partitions, its leader's side included",
        "wire": f"Produce v3, one {args.batch_bytes // 1024} KiB batch, over a loopback connection",
    }[args.api]
    partitions = args.partitions if args.api in ("idle-follower", "idle-round") else 1
    path = {"wire": "its connection", "idle-round": "a loopback connection"}.get(args.api, "Dispatcher.dispatch")
    if args.instructions:
        count = instructions_per_request(args.api, args.requests, args.batch_bytes, partitions, args.fetch_wait_ms)
        print(f"{what}, through {path}: {count:,.0f} user-space instructions per request")
        if partitions > 1:
            print(f"{count / partitions:,.0f} per partition")
        return
    with tempfile.TemporaryDirectory(prefix="logway-request-cost-") as scratch:
        result = uvloop.run(
            measure(
                Path(scratch), args.requests, args.repeats, args.batch_bytes, args.calls, args.api, partitions,
                args.fetch_wait_ms,
            )
        )
    print(
        f"{what}, through {path}: thread CPU per request "
        f"min {result['min_us']:.1f} us, q1 {result['q1_us']:.1f} us, median {result['median_us']:.1f} us "
        f"({args.repeats} x {args.requests} requests)"
    )
    if partitions > 1:
        print(f"per partition: min {result['min_us'] / partitions:.2f} us, median {result['median_us'] / partitions:.2f} us")
    if "python_calls" in result:
        print(f"Python calls per request: {result['python_calls']:.0f}")


if __name__ == "__main__":
    main()
