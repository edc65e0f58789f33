"""What the broker counts as it serves requests: plain numbers owned by the event loop.

The hot path bumps these per request or per partition of a request, never per record, without
locks (everything runs on the loop); the collectors (broker/metrics/collectors.py) turn them
into Prometheus families when the registry is read, also on the loop.
"""

import time
from collections.abc import Container, Iterable, Iterator
from typing import Final

# Bucket bounds in milliseconds of the request, flush and ZooKeeper latency histograms: from
# sub-millisecond requests to a long poll's full wait (Kafka's fetch.max.wait.ms is 500 ms,
# request.timeout.ms 30 s).
LATENCY_BUCKETS_MS: Final = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)


def bucket(bounds: tuple[float, ...], value: float) -> int:
    """The index of the first bound at or above `value` (len(bounds) when none is), as
    bisect_left gives it. Written out because compiled it compares C doubles, where bisect's
    generic comparisons cost about a thousand instructions a call, five times per request.

    Scanned from the lowest bound: most of a request's five times (queue, local, remote, send,
    total) are under a millisecond, found in one to three steps, where a binary search of the
    17 latency bounds takes four or five each. On an overloaded broker the queue and total
    times of tens of milliseconds take about nine steps each, the other three one: still fewer
    in all."""
    index = 0
    count = len(bounds)
    while index < count and bounds[index] < value:
        index += 1
    return index


class Histogram:
    """Counts of observations per bucket and their sum (Prometheus' cumulative buckets are made
    when read)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float] = LATENCY_BUCKETS_MS) -> None:
        self.bounds = tuple(float(bound) for bound in bounds)  # floats, for `bucket`
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bucket(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> Iterator[tuple[str, int]]:
        """(le, observations at or below it) per bucket, "+Inf" last."""
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            total += count
            yield ("+Inf" if bound == float("inf") else repr(float(bound))), total


class TopicStats:
    """Kafka's BrokerTopicMetrics of one topic (counts since start)."""

    __slots__ = (
        "messages_in", "bytes_in", "bytes_out", "bytes_rejected", "produce_requests",
        "failed_produce_requests", "fetch_requests", "failed_fetch_requests",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_rejected = 0
        self.produce_requests = 0
        self.failed_produce_requests = 0
        self.fetch_requests = 0
        self.failed_fetch_requests = 0

    def add(self, other: "TopicStats") -> None:
        self.messages_in += other.messages_in
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        self.bytes_rejected += other.bytes_rejected
        self.produce_requests += other.produce_requests
        self.failed_produce_requests += other.failed_produce_requests
        self.fetch_requests += other.fetch_requests
        self.failed_fetch_requests += other.failed_fetch_requests


class BrokerTopicStats:
    """TopicStats by topic. Produce counts each partition append (as Kafka marks its
    TotalProduceRequestsPerSec per partition), Fetch each partition read by a consumer;
    followers' fetches are not counted (Kafka counts them in ReplicationBytesOutPerSec)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicStats] = {}
        self.retired = TopicStats()  # the counts of forgotten topics, kept in the broker's totals

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats

    def appended(self, topic: str, first_offset: int, last_offset: int, nbytes: int) -> None:
        stats = self.topic(topic)
        stats.produce_requests += 1
        stats.messages_in += last_offset - first_offset + 1
        stats.bytes_in += nbytes

    def append_failed(self, topic: str, nbytes: int) -> None:
        stats = self.topic(topic)
        stats.produce_requests += 1
        stats.failed_produce_requests += 1
        stats.bytes_rejected += nbytes

    def fetched(self, topic: str, nbytes: int, failed: bool) -> None:
        stats = self.topic(topic)
        stats.fetch_requests += 1
        stats.bytes_out += nbytes
        if failed:
            stats.failed_fetch_requests += 1

    def forget(self, topic: str) -> None:
        """A deleted topic's counts go with it, as Kafka removes its topic metrics; the broker's
        totals keep them."""
        stats = self.topics.pop(topic, None)
        if stats is not None:
            self.retired.add(stats)

    def retain(self, existing: Container[str]) -> None:
        """Forget the topics not in `existing` (deleted, or never there: a produce to an unknown
        topic is counted as failed)."""
        for topic in [t for t in self.topics if t not in existing]:
            self.forget(topic)


class RequestTimes:
    """Kafka's RequestMetrics of one request name: how many, and where their time went."""

    __slots__ = ("requests", "queue", "local", "remote", "send", "total")

    def __init__(self) -> None:
        # Counts by version, the version the index: a list index where a dict costs a hash
        # lookup and a store per request.
        self.requests: list[int] = []
        self.queue = Histogram()
        self.local = Histogram()
        self.remote = Histogram()
        self.send = Histogram()
        self.total = Histogram()

    def by_version(self) -> dict[int, int]:
        """The count of each version seen."""
        return {version: count for version, count in enumerate(self.requests) if count}


class SendTimer:
    """A response on its way out: its connection calls `sent` once its last byte went to the
    socket (or, on TLS, to the encryption), which records the send time and the total time."""

    __slots__ = ("times", "before_ms")

    def __init__(self, times: RequestTimes, before_ms: float) -> None:
        self.times = times
        self.before_ms = before_ms  # queue, local and remote time

    def sent(self, seconds: float) -> None:
        send_ms = seconds * 1000
        total_ms = self.before_ms + send_ms
        # Histogram.observe, inlined: once per response.
        times = self.times
        send, total = times.send, times.total
        send.counts[bucket(send.bounds, send_ms)] += 1
        send.sum += send_ms
        total.counts[bucket(total.bounds, total_ms)] += 1
        total.sum += total_ms


class RequestStats:
    """RequestTimes by Kafka's request name ("Produce", "FetchConsumer"...)."""

    def __init__(self) -> None:
        self.by_name: dict[str, RequestTimes] = {}

    def record(self, name: str, version: int, queue_ms: float, local_ms: float, remote_ms: float) -> RequestTimes:
        """Count a request and its times but the send and total time (see SendTimer)."""
        times = self.by_name.get(name)
        if times is None:
            times = self.by_name[name] = RequestTimes()
        requests = times.requests
        if version >= len(requests):
            requests.extend([0] * (version + 1 - len(requests)))
        requests[version] += 1
        # Histogram.observe, inlined and unrolled: once per request.
        queue, local, remote = times.queue, times.local, times.remote
        queue.counts[bucket(queue.bounds, queue_ms)] += 1
        queue.sum += queue_ms
        local.counts[bucket(local.bounds, local_ms)] += 1
        local.sum += local_ms
        remote.counts[bucket(remote.bounds, remote_ms)] += 1
        remote.sum += remote_ms
        return times


class LoopIdle:
    """The share of time the event loop (logway's one network thread) spent waiting rather than
    running: 1 - its thread's CPU time over wall time, sampled every `period_s` seconds.

    CPU time stands for busy time: the loop thread waits only in the selector (everything that
    blocks runs on other threads), so what it does not spend on the CPU it spends idle."""

    def __init__(self) -> None:
        self.idle = 1.0
        self._wall = time.monotonic()
        self._cpu = time.thread_time()

    def sample(self) -> None:
        """Called on the loop's thread."""
        wall, cpu = time.monotonic(), time.thread_time()
        elapsed = wall - self._wall
        if elapsed > 0:
            self.idle = min(max(1.0 - (cpu - self._cpu) / elapsed, 0.0), 1.0)
        self._wall, self._cpu = wall, cpu


class ZkSessionStats:
    """Kafka's SessionExpireListener counts: ZooKeeper session events seen since start."""

    __slots__ = ("state", "sync_connects", "disconnects", "expires")

    def __init__(self) -> None:
        self.state = "NOT_CONNECTED"
        self.sync_connects = 0
        self.disconnects = 0
        self.expires = 0


def request_name(api_name: str) -> str:
    """Kafka's name of an API (ApiKeys.name): LIST_OFFSETS -> ListOffsets."""
    return "".join(word.capitalize() for word in api_name.split("_"))
