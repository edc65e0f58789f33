"""The broker's CPU per Produce request without the socket, in process (issue 19).

    python -m benchmarks.request_cost [--requests 3000] [--repeats 15] [--batch-bytes 16384] [--calls]

A standalone broker runs in this process (tests.in_process.running_broker, uvloop) with a
one-partition topic; the wire benchmark's Produce v3 request (one batch of 100 B records, about
`batch-bytes` long, acks=1) is handed to `Dispatcher.dispatch` `requests` times in a row, as a
connection would hand it (the same bytes each time: the broker patches baseOffset in place), and
the response's send time is recorded as the connection records it. Each repetition measures the
thread's CPU time (user and system: the append's pwrite included) per request; the minimum and
quartiles over `repeats` repetitions are printed. That covers the header, parsing, the handler,
validation, the append, the index entry, the request metrics and the response encoding; not
reading the socket, framing or sending (benchmarks.run's wire-produce-16k has those).

`--calls` also counts the Python function calls one request makes (cProfile; slows that pass
down, its time is not reported): a steady measure of per-request Python work when the machine is
too loaded for timings to agree. Bounded by the request and repetition counts.
"""

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

import uvloop

from benchmarks import wire
from tests.in_process import CLIENT_SESSION, running_broker

_TOPIC = "request-cost"
_WARM_UP = 2000


async def measure(data_dir: Path, requests: int, repeats: int, batch_bytes: int, calls: bool) -> dict:
    async with running_broker(data_dir, None) as broker:
        await broker.topics.create(_TOPIC, 1, {})
        batch, _ = wire.make_batch(100, batch_bytes)
        frame = memoryview(wire.produce_request(_TOPIC, 0, batch))[4:]
        dispatch = broker.dispatcher.dispatch
        session = CLIENT_SESSION

        def serve_one() -> None:
            chunks = dispatch(frame, session)
            if chunks is None or not isinstance(chunks, list):
                raise RuntimeError(f"produce was not answered at once: {chunks!r}")
            if session.send_timer is not None:  # as the connection does once the answer is out
                session.send_timer.sent(0.0)
                session.send_timer = None

        for _ in range(_WARM_UP):
            serve_one()
        per_request = []
        for _ in range(repeats):
            started = time.thread_time()
            for _ in range(requests):
                serve_one()
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
                serve_one()
            profile.disable()
            result["python_calls"] = pstats.Stats(profile).total_calls / requests
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests per repetition")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--calls", action="store_true", help="also count Python calls per request")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="logway-request-cost-") as scratch:
        result = uvloop.run(measure(Path(scratch), args.requests, args.repeats, args.batch_bytes, args.calls))
    print(
        f"Produce v3, one {args.batch_bytes // 1024} KiB batch, through Dispatcher.dispatch: thread CPU per request "
        f"min {result['min_us']:.1f} us, q1 {result['q1_us']:.1f} us, median {result['median_us']:.1f} us "
        f"({args.repeats} x {args.requests} requests)"
    )
    if "python_calls" in result:
        print(f"Python calls per request: {result['python_calls']:.0f}")


if __name__ == "__main__":
    main()
