"""What the broker counts as it serves requests: plain numbers owned by the event loop.

The hot path bumps these per request or per partition of a request, never per record, without
locks (everything runs on the loop); the collectors (broker/metrics/collectors.py) turn them
into Prometheus families when the registry is read, also on the loop.
"""

import time
from collections.abc import Container, Iterator
from typing import Final

# Bucket bounds in milliseconds of the request, flush and ZooKeeper latency histograms: from
# sub-millisecond requests to a long poll's full wait (Kafka's fetch.max.wait.ms is 500 ms,
# request.timeout.ms 30 s). latency_bucket spells them out again.
LATENCY_BUCKETS_MS: Final = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)


def latency_bucket(ms: float) -> int:
    """The index of the first of LATENCY_BUCKETS_MS at or above `ms` (17 when none is), as
    bisect_left gives it (tests/unit/broker/metrics/test_stats.py holds the two together).

    A ladder of comparisons with constants, each one C comparison compiled: five times are
    counted a request, most under a millisecond, found here in two to four comparisons. Reading
    the bounds from a tuple cost about 250 instructions a time (each bound a boxed float)."""
    if ms <= 1.0:
        if ms <= 0.1:
            return 0
        if ms <= 0.25:
            return 1
        return 2 if ms <= 0.5 else 3
    if ms <= 50.0:
        if ms <= 2.5:
            return 4
        if ms <= 5.0:
            return 5
        if ms <= 10.0:
            return 6
        return 7 if ms <= 25.0 else 8
    if ms <= 100.0:
        return 9
    if ms <= 250.0:
        return 10
    if ms <= 500.0:
        return 11
    if ms <= 1000.0:
        return 12
    if ms <= 2500.0:
        return 13
    if ms <= 5000.0:
        return 14
    if ms <= 10000.0:
        return 15
    return 16 if ms <= 30000.0 else 17


class Histogram:
    """Counts of observations in milliseconds per bucket of LATENCY_BUCKETS_MS, and their sum
    (Prometheus' cumulative buckets are made when read)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts: list[int] = [0] * (len(LATENCY_BUCKETS_MS) + 1)  # the last: above every bound
        self.sum = 0.0

    def observe(self, ms: float) -> None:
        counts, index = self.counts, latency_bucket(ms)
        counts[index] = counts[index] + 1  # compiled: an int add, where `+= 1` is a generic call
        self.sum += ms

    def cumulative(self) -> Iterator[tuple[str, int]]:
        """(le, observations at or below it) per bucket, "+Inf" last."""
        total = 0
        for bound, count in zip((*LATENCY_BUCKETS_MS, float("inf")), self.counts):
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
        # Bytes of records sent to followers (Kafka's ReplicationBytesOutPerSec, a broker total
        # with no topic, as Kafka's)
        self.replication_bytes_out = 0

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
        counts, index = send.counts, latency_bucket(send_ms)
        counts[index] = counts[index] + 1
        send.sum += send_ms
        counts, index = total.counts, latency_bucket(total_ms)
        counts[index] = counts[index] + 1
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
        requests[version] = requests[version] + 1
        # Histogram.observe, inlined and unrolled: once per request.
        queue, local, remote = times.queue, times.local, times.remote
        counts, index = queue.counts, latency_bucket(queue_ms)
        counts[index] = counts[index] + 1
        queue.sum += queue_ms
        counts, index = local.counts, latency_bucket(local_ms)
        counts[index] = counts[index] + 1
        local.sum += local_ms
        counts, index = remote.counts, latency_bucket(remote_ms)
        counts[index] = counts[index] + 1
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
