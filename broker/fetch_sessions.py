"""Incremental fetch sessions (KIP-227): Kafka's FetchSession, FetchSessionCache and FetchManager.

A full Fetch (session_id 0) with session_epoch 0 asks for a session. The broker keeps the
partitions it named, each with its fetch parameters and the high watermark and log start offset
last answered, and gives the session's id in the response. From then on the client sends only
what changed: partitions new to the session or with new fetch parameters, and in
forgotten_topics_data those to drop, with the epoch counting up from 1. The broker reads every
partition of the session, as a full fetch would, and answers only those with records, an error,
a changed high watermark or log start offset, a preferred read replica or a diverging epoch. An
idle follower's fetch of 10,000 partitions thus costs a few bytes each way instead of 10,000
partitions' worth. Partitions answered with records go to the end of the session's order, so a
response's max_bytes is shared out in turn.

The rules, as Kafka 3.9's (topic ids come with Fetch v13, which logway does not serve):
- epoch -1 (every request before v7, and librdkafka's): no session; with a session_id, that
  session is closed first. Epoch 0 closes the session named and opens a new one when the cache
  has a slot (max.incremental.fetch.session.cache.slots, 1000 by default; 0 turns sessions
  off) or can evict one; without one the answer has session_id 0 and the client goes on with
  full fetches.
- An incremental request (epoch > 0) naming no cached session gets FETCH_SESSION_ID_NOT_FOUND,
  one whose epoch is not the session's INVALID_FETCH_SESSION_EPOCH (a duplicate or lost
  request); the client starts over with a full fetch. So does one answered after a later
  request of its session moved the epoch on (a long poll overtaken). A session left without
  partitions is closed, and its fetch answered without one.
- Eviction (Kafka's tryEvict), when a new session finds the cache full: first the session
  unused the longest, if unused for more than 120 s; else the least valuable evictable one, if
  the new session is worth more. Value orders by (privileged, partitions): followers' sessions
  are privileged; a session is evictable by any new one once older than 120 s, by a privileged
  one also while younger when it is not privileged itself.

Memory: at most max.incremental.fetch.session.cache.slots sessions, holding at most
MAX_CACHED_PARTITIONS partitions together (about 300 bytes each). Kafka has no such bound: a
client could grow its session by one request after another with partitions of topics that do
not exist. A full fetch that would go past it gets no session; an incremental one that does has
its session closed and is answered without one (session_id 0), and its client goes on with
full fetches, as after any session the broker closed.

Not thread-safe: the event loop owns the cache, as it owns the logs.
"""

import random
import time
from collections.abc import Callable
from typing import Final

from protocol.errors import ErrorCode
from protocol.fetch import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    TopicResult,
    next_epoch,
)
from storage.topic_partition import TopicPartition

# Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (not a config in Kafka either).
EVICTION_MS: Final = 120_000
# Twenty followers' sessions of 10,000 partitions, or a thousand consumers' of 200.
MAX_CACHED_PARTITIONS: Final = 200_000
_MAX_SESSION_ID: Final = 2**31 - 2
# Compiled code looks an enum member up generically at each use; a Final is read natively.
_NO_ERROR: Final = ErrorCode.none
# TopicPartition(...) runs the NamedTuple's interpreted __new__; tuple.__new__ builds the same
# tuple from C (as broker.replica_manager does).
_new_tuple: Final = tuple.__new__


class CachedPartition:
    """A session's partition: its fetch parameters as last sent, and what was last answered."""

    __slots__ = ("topic", "tp", "fetch", "high_watermark", "log_start_offset")

    def __init__(self, topic: str, fetch: FetchPartition) -> None:
        self.topic = topic
        # Its key in the session, and what each read of the session looks the partition up by:
        # built once, not at every fetch.
        self.tp: TopicPartition = _new_tuple(TopicPartition, (topic, fetch.partition))
        self.fetch = fetch
        # -1: not answered yet (or last answered with an error), so the next answer includes it.
        self.high_watermark = -1
        self.log_start_offset = -1


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "created_ms", "last_used_ms", "epoch", "_order", "_order_tps")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[tuple[str, int], CachedPartition], now_ms: float) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # in the order they are read and answered
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self._order: list[CachedPartition] | None = None  # partitions' order of the last request built
        self._order_tps: list[TopicPartition] = []  # their TopicPartitions, in that order

    def update(self, topics: list[FetchTopic], forgotten: list[tuple[str, list[int]]]) -> bool:
        """An incremental request's changes: partitions added or with new fetch parameters,
        then those forgotten (Kafka applies them in this order too). Whether it added any."""
        partitions = self.partitions
        before = len(partitions)
        for topic in topics:
            name = topic.topic
            for fetch in topic.partitions:
                cached = partitions.get((name, fetch.partition))
                if cached is None:
                    cached = CachedPartition(name, fetch)
                    partitions[cached.tp] = cached
                    self._order = None
                else:
                    cached.fetch = fetch
        added = len(partitions) > before
        for name, indexes in forgotten:
            for index in indexes:
                if partitions.pop((name, index), None) is not None:
                    self._order = None
        return added

    def request(self, incremental: FetchRequest) -> FetchRequest:
        """The fetch to read: the incremental request's settings over every partition of the
        session, in the session's order (a topic may come more than once)."""
        order = self._order
        if order is None:
            order = self._order = list(self.partitions.values())
            self._order_tps = [cached.tp for cached in order]
        topics: list[FetchTopic] = []
        current: FetchTopic | None = None
        for cached in order:
            if current is None or current.topic != cached.topic:
                current = FetchTopic(cached.topic, [])
                topics.append(current)
            current.partitions.append(cached.fetch)
        return FetchRequest(
            incremental.replica_id, incremental.max_wait_ms, incremental.min_bytes, incremental.max_bytes,
            incremental.isolation_level, topics, incremental.session_id, incremental.rack_id,
            incremental.session_epoch,
        )

    def topic_partitions(self) -> list[TopicPartition]:
        """The TopicPartitions of `request()`'s partitions, in its order (a list never changed
        once built: a long poll may watch it)."""
        return self._order_tps

    def changed(self, topics: list[TopicResult]) -> list[TopicResult]:
        """The answer to an incremental fetch: of the results of `request()`'s partitions (in its
        order), those the client must see (Kafka's CachedPartition.maybeUpdateResponseData),
        remembering what they said."""
        order = self._order
        assert order is not None, "answered without request() having built the order"
        answered: list[TopicResult] = []
        moved: list[CachedPartition] = []
        index = 0
        for topic in topics:
            kept = []
            for result in topic.partitions:
                cached = order[index]
                index += 1
                must = result.preferred_read_replica >= 0 or result.diverging_epoch is not None
                records = result.records
                if records is not None and len(records) > 0:
                    must = True
                    moved.append(cached)
                if cached.high_watermark != result.high_watermark:
                    cached.high_watermark = result.high_watermark
                    must = True
                if cached.log_start_offset != result.log_start_offset:
                    cached.log_start_offset = result.log_start_offset
                    must = True
                if result.error_code != _NO_ERROR:
                    cached.high_watermark = -1  # sent again once the error is gone
                    must = True
                if must:
                    kept.append(result)
            if kept:
                answered.append(TopicResult(topic.topic, kept))
        if moved:
            partitions = self.partitions
            for cached in moved:
                key = cached.tp
                if partitions.get(key) is cached:
                    del partitions[key]
                    partitions[key] = cached
            self._order = None
        return answered

    def remember(self, topics: list[TopicResult]) -> None:
        """What a full fetch that opened this session answered."""
        partitions = self.partitions
        for topic in topics:
            for result in topic.partitions:
                cached = partitions.get((topic.topic, result.partition_index))
                if cached is not None:
                    cached.high_watermark = -1 if result.error_code != _NO_ERROR else result.high_watermark
                    cached.log_start_offset = result.log_start_offset


class FetchContext:
    """What a fetch does with sessions once read (Kafka's FetchContext): `request` is what to
    read; `answer` gives the response's error, session id and partitions."""

    __slots__ = ("cache", "request", "session", "creates", "expected_epoch", "partitions")

    def __init__(self, cache: "FetchSessionCache", request: FetchRequest, session: FetchSession | None, creates: bool) -> None:
        self.cache = cache
        self.request = request
        self.session = session  # an incremental fetch's
        self.creates = creates  # a full fetch asking for a session
        self.expected_epoch = session.epoch if session is not None else 0
        # An incremental fetch's: `request`'s TopicPartitions in order, kept by the session.
        self.partitions = session.topic_partitions() if session is not None else None

    def answer(self, topics: list[TopicResult]) -> tuple[ErrorCode, int, list[TopicResult]]:
        session = self.session
        if session is not None:
            if session.epoch != self.expected_epoch:
                # Another request of the session was served meanwhile (Kafka: a duplicate).
                return ErrorCode.invalid_fetch_session_epoch, session.id, []
            return ErrorCode.none, session.id, session.changed(topics)
        if self.creates:
            return ErrorCode.none, self.cache.create(self.request, topics), topics
        return ErrorCode.none, 0, topics


class FetchSessionCache:
    """The broker's fetch sessions, at most `max_entries`."""

    def __init__(
        self,
        max_entries: int,
        eviction_ms: int = EVICTION_MS,
        clock: Callable[[], float] = time.monotonic,
        max_partitions: int = MAX_CACHED_PARTITIONS,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.max_partitions = max_partitions
        self._clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    @property
    def partitions(self) -> int:
        """Partitions cached over all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return sum(len(session.partitions) for session in self.sessions.values())

    def context(self, request: FetchRequest) -> FetchContext | ErrorCode:
        """The context of a fetch (Kafka's FetchManager.newContext), or the session error to
        answer it with."""
        epoch = request.session_epoch
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:
            if request.session_id != 0:
                self.sessions.pop(request.session_id, None)  # a full fetch closes its session
            return FetchContext(self, request, None, epoch == INITIAL_EPOCH and self.max_entries > 0)
        session = self.sessions.get(request.session_id)
        if session is None:
            return ErrorCode.fetch_session_id_not_found
        if session.epoch != epoch:
            return ErrorCode.invalid_fetch_session_epoch
        grew = session.update(request.topics, request.forgotten)
        if not session.partitions or (grew and self.partitions > self.max_partitions):
            del self.sessions[session.id]  # emptied, or too many partitions cached: see above
            return FetchContext(self, request, None, False)
        session.last_used_ms = self._now()
        session.epoch = next_epoch(epoch)
        return FetchContext(self, session.request(request), session, False)

    def create(self, request: FetchRequest, answered: list[TopicResult]) -> int:
        """A session for a full fetch asking for one, if there is room; its id, or 0."""
        now = self._now()
        privileged = request.replica_id >= 0
        size = sum(len(topic.partitions) for topic in request.topics)
        if len(self.sessions) >= self.max_entries and not self._evict(privileged, size, now):
            return 0
        if self.partitions + size > self.max_partitions:
            return 0
        partitions: dict[tuple[str, int], CachedPartition] = {}
        for topic in request.topics:
            for fetch in topic.partitions:
                cached = CachedPartition(topic.topic, fetch)
                partitions[cached.tp] = cached
        session_id = self._new_id()
        session = self.sessions[session_id] = FetchSession(session_id, privileged, partitions, now)
        session.remember(answered)
        return session_id

    def remove(self, session_id: int) -> None:
        self.sessions.pop(session_id, None)

    def _evict(self, privileged: bool, size: int, now: float) -> bool:
        """Make room for a new session of `size` partitions (Kafka's tryEvict); whether it did."""
        sessions = self.sessions
        if not sessions:
            return False
        stalest = min(sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stalest.last_used_ms > self.eviction_ms:
            self._evicted(stalest)
            return True
        evictable = [
            s for s in sessions.values()
            if now - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not evictable:
            return False
        least = min(evictable, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size, 0) < (least.privileged, len(least.partitions), least.id):
            return False
        self._evicted(least)
        return True

    def _evicted(self, session: FetchSession) -> None:
        del self.sessions[session.id]
        self.evictions += 1

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, _MAX_SESSION_ID)
            if session_id not in self.sessions:
                return session_id

    def _now(self) -> float:
        return self._clock() * 1000
