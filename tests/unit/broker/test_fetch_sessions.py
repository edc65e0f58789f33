"""The fetch session cache on its own (KIP-227's rules, Kafka's FetchSessionCacheTest cases);
sessions served through the broker are in test_fetch_handlers.py."""

import pytest

from broker.fetch_sessions import EVICTION_MS, FetchContext, FetchSessionCache
from protocol.errors import ErrorCode
from protocol.fetch import FetchPartition, FetchRequest, FetchTopic, PartitionResult, TopicResult, next_epoch


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms / 1000


def request(partitions, *, session_id=0, epoch=0, replica_id=-1, forgotten=None, offset=0):
    """A fetch of [(topic, partition)], every fetch offset `offset`."""
    topics: dict[str, list[FetchPartition]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(FetchPartition(partition, offset, 1 << 20))
    return FetchRequest(
        replica_id, 500, 1, 1 << 20, 0, [FetchTopic(t, ps) for t, ps in topics.items()], session_id, "", epoch, forgotten
    )


def results(read: FetchRequest, *, high_watermark=10, records=b"", errors=()):
    """What reading `read` gives: one result per partition in its order."""
    return [
        TopicResult(
            topic.topic,
            [
                PartitionResult(
                    p.partition,
                    error_code=ErrorCode.not_leader_or_follower if (topic.topic, p.partition) in errors else ErrorCode.none,
                    high_watermark=high_watermark,
                    log_start_offset=0,
                    records=records,
                )
                for p in topic.partitions
            ],
        )
        for topic in read.topics
    ]


def names(topics):
    """[(topic, partition)] of a request's FetchTopics or an answer's TopicResults."""
    return [(t.topic, getattr(p, "partition_index", getattr(p, "partition", None))) for t in topics for p in t.partitions]


def open_session(cache, partitions, *, replica_id=-1):
    context = cache.context(request(partitions, replica_id=replica_id))
    error, session_id, _ = context.answer(results(context.request))
    assert error == ErrorCode.none and session_id > 0
    return session_id


def test_epochs_count_from_one_and_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(-1) == -1


def test_a_full_fetch_with_epoch_0_opens_a_session_and_one_with_epoch_minus_1_does_not():
    cache = FetchSessionCache(10)

    sessionless = cache.context(request([("t", 0)], epoch=-1))
    assert sessionless.answer(results(sessionless.request))[1] == 0

    session_id = open_session(cache, [("t", 0), ("t", 1)])
    assert list(cache.sessions) == [session_id] and cache.partitions == 2


def test_an_incremental_fetch_reads_every_partition_and_answers_only_the_changed():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("a", 0), ("a", 1), ("b", 0)])

    context = cache.context(request([], session_id=session_id, epoch=1))
    assert names(context.request.topics) == [("a", 0), ("a", 1), ("b", 0)]
    error, answered_id, answered = context.answer(results(context.request))
    assert (error, answered_id, names(answered)) == (ErrorCode.none, session_id, [])  # nothing changed

    context = cache.context(request([], session_id=session_id, epoch=2))
    answer = results(context.request)
    answer[0].partitions[1].high_watermark = 11  # a/1's high watermark moved
    answer[1].partitions[0].records = b"x" * 10  # b/0 has records
    _, _, answered = context.answer(answer)
    assert names(answered) == [("a", 1), ("b", 0)]


def test_partitions_answered_with_records_go_to_the_end_of_the_session():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0), ("t", 1), ("t", 2)])
    context = cache.context(request([], session_id=session_id, epoch=1))
    answer = results(context.request)
    answer[0].partitions[0].records = b"x"
    context.answer(answer)

    context = cache.context(request([], session_id=session_id, epoch=2))

    assert names(context.request.topics) == [("t", 1), ("t", 2), ("t", 0)]


def test_a_partition_answered_with_an_error_is_answered_again_once_the_error_is_gone():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0)])
    context = cache.context(request([], session_id=session_id, epoch=1))
    _, _, answered = context.answer(results(context.request, errors={("t", 0)}))
    assert names(answered) == [("t", 0)]

    context = cache.context(request([], session_id=session_id, epoch=2))
    _, _, answered = context.answer(results(context.request))  # no error, high watermark as before

    assert names(answered) == [("t", 0)]


def test_an_incremental_fetch_adds_changes_and_forgets_partitions():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0), ("t", 1)])

    changed = request([("t", 1), ("u", 0)], session_id=session_id, epoch=1, forgotten=[("t", [0])], offset=7)
    context = cache.context(changed)

    assert names(context.request.topics) == [("t", 1), ("u", 0)]
    assert [p.fetch_offset for t in context.request.topics for p in t.partitions] == [7, 7]


def test_an_incremental_fetchs_topic_partitions_follow_its_read_order_and_are_built_once():
    """A session keeps the TopicPartitions its reads look partitions up by, in the order of the
    request it builds: the same list while the order stands, a new one when it changes."""
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0), ("t", 1)])
    first = cache.context(request([], session_id=session_id, epoch=1))
    assert first.partitions == names(first.request.topics) == [("t", 0), ("t", 1)]
    first.answer(results(first.request))

    unchanged = cache.context(request([], session_id=session_id, epoch=2))
    assert unchanged.partitions is first.partitions
    answer = results(unchanged.request)
    answer[0].partitions[0].records = b"x"  # ("t", 0) moves to the end
    unchanged.answer(answer)

    reordered = cache.context(request([("u", 0)], session_id=session_id, epoch=3))
    assert reordered.partitions == names(reordered.request.topics) == [("t", 1), ("t", 0), ("u", 0)]
    assert first.partitions == [("t", 0), ("t", 1)]  # a long poll watching the old list keeps it
    assert cache.context(request([("t", 0)], epoch=-1)).partitions is None  # sessionless: built by the read


def test_an_incremental_fetch_that_forgets_every_partition_closes_the_session():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0)])

    context = cache.context(request([], session_id=session_id, epoch=1, forgotten=[("t", [0])]))

    assert context.answer([])[1] == 0 and not cache.sessions


def test_unknown_sessions_and_wrong_epochs_are_refused():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0)])

    assert cache.context(request([], session_id=session_id + 1, epoch=1)) == ErrorCode.fetch_session_id_not_found
    assert cache.context(request([], session_id=session_id, epoch=2)) == ErrorCode.invalid_fetch_session_epoch
    assert isinstance(cache.context(request([], session_id=session_id, epoch=1)), FetchContext)
    # The same request again (a retry of a lost answer) is a duplicate by now.
    assert cache.context(request([], session_id=session_id, epoch=1)) == ErrorCode.invalid_fetch_session_epoch


def test_an_answer_overtaken_by_a_later_request_of_its_session_is_refused():
    # A long poll still waiting when its client's next request comes (Kafka's check in
    # updateAndGenerateResponseData).
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0)])
    waiting = cache.context(request([], session_id=session_id, epoch=1))
    later = cache.context(request([], session_id=session_id, epoch=2))

    assert waiting.answer(results(waiting.request))[:2] == (ErrorCode.invalid_fetch_session_epoch, session_id)
    assert later.answer(results(later.request))[:2] == (ErrorCode.none, session_id)


def test_a_full_fetch_naming_a_session_closes_it():
    cache = FetchSessionCache(10)
    session_id = open_session(cache, [("t", 0)])

    cache.context(request([("t", 0)], session_id=session_id, epoch=-1))

    assert session_id not in cache.sessions


def test_no_session_is_opened_with_no_slots():
    cache = FetchSessionCache(0)
    context = cache.context(request([("t", 0)]))

    assert context.answer(results(context.request))[1] == 0 and not cache.sessions


def test_a_full_cache_evicts_a_session_unused_for_longer_than_the_eviction_time():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    first = open_session(cache, [("t", 0), ("t", 1), ("t", 2)])
    clock.ms += 1000
    second = open_session(cache, [("t", 0), ("t", 1), ("t", 2)])
    clock.ms += EVICTION_MS  # first unused for longer than that, second not

    third = open_session(cache, [("t", 0)])

    assert first not in cache.sessions and set(cache.sessions) == {second, third} and cache.evictions == 1


def test_a_full_cache_of_recent_sessions_evicts_none_for_a_consumer():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    open_session(cache, [("t", 0)])
    open_session(cache, [("t", 0)])

    context = cache.context(request([("t", 0), ("t", 1), ("t", 2)]))

    assert context.answer(results(context.request))[1] == 0 and len(cache.sessions) == 2


def test_a_followers_session_evicts_a_recent_consumers():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    consumer = open_session(cache, [("t", 0), ("t", 1)])
    follower = open_session(cache, [("t", 0)], replica_id=2)

    newer_follower = open_session(cache, [("t", 0)], replica_id=3)

    assert set(cache.sessions) == {follower, newer_follower} and consumer not in cache.sessions


@pytest.mark.parametrize("partitions, evicts", [(3, True), (2, False)])
def test_an_old_session_is_evicted_only_for_a_larger_one(partitions, evicts):
    # Both sessions are older than the eviction time but were used recently.
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    small = open_session(cache, [("t", 0), ("t", 1)])
    large = open_session(cache, [("t", p) for p in range(5)])
    clock.ms += EVICTION_MS + 1
    for session_id in (small, large):
        session = cache.sessions[session_id]
        cache.context(request([], session_id=session_id, epoch=session.epoch))  # used now

    context = cache.context(request([("t", p) for p in range(partitions)]))
    created = context.answer(results(context.request))[1]

    assert (created != 0) == evicts
    assert (small in cache.sessions) != evicts and large in cache.sessions


def test_sessions_hold_at_most_so_many_partitions_together():
    # A client growing its session request by request with partitions of no topic must not
    # hold the broker's memory: past the bound its session is closed, its fetch answered
    # without one, and a new session too large is not opened.
    cache = FetchSessionCache(10, max_partitions=5)
    session_id = open_session(cache, [("t", 0), ("t", 1), ("t", 2)])

    within = cache.context(request([("u", 0), ("u", 1)], session_id=session_id, epoch=1))
    assert within.answer(results(within.request))[1] == session_id and cache.partitions == 5
    past = cache.context(request([("v", 0)], session_id=session_id, epoch=2))
    assert past.answer(results(past.request))[1] == 0 and not cache.sessions

    too_large = cache.context(request([("t", p) for p in range(6)]))
    assert too_large.answer(results(too_large.request))[1] == 0 and not cache.sessions
