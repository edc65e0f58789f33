"""A follower's side of a fetch session: what each request sends, and when it starts over with
a full one. Served by a real leader in tests/unit/replication/test_fetcher.py and the cluster
tests."""

from protocol.errors import ErrorCode
from replication.fetch_session import FetchSessionClient, Wanted
from storage.topic_partition import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class State:
    """A partition's fetch state: only its identity matters here."""


def wanted(offsets: dict[TopicPartition, int], states: dict[TopicPartition, State]) -> dict[TopicPartition, Wanted]:
    return {tp: Wanted(states[tp], offset, 5, 4, 0, 1 << 20) for tp, offset in offsets.items()}


def sent(request):
    return {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}


def forgotten(request):
    return {(topic, p) for topic, partitions in request.forgotten for p in partitions}


def started(states) -> FetchSessionClient:
    """A client whose full fetch of a/0, a/1 and b/0 at offset 0 opened session 9."""
    client = FetchSessionClient()
    client.request(wanted({A0: 0, A1: 0, B0: 0}, states))
    assert client.answered(ErrorCode.none, 9)
    return client


def test_the_first_fetch_is_full_and_asks_for_a_session():
    states = {A0: State(), A1: State(), B0: State()}
    request = FetchSessionClient().request(wanted({A0: 0, A1: 0, B0: 0}, states))

    assert (request.session_id, request.session_epoch) == (0, 0)
    assert sent(request) == {("a", 0): 0, ("a", 1): 0, ("b", 0): 0} and not request.forgotten


def test_then_only_changes_are_sent_and_the_epoch_counts_up():
    states = {A0: State(), A1: State(), B0: State()}
    client = started(states)

    unchanged = client.request(wanted({A0: 0, A1: 0, B0: 0}, states))
    assert (unchanged.session_id, unchanged.session_epoch, sent(unchanged)) == (9, 1, {})
    client.answered(ErrorCode.none, 9)

    moved = client.request(wanted({A0: 3, B0: 0}, states))  # a/0 got records, a/1 is not fetched now
    assert (moved.session_epoch, sent(moved), forgotten(moved)) == (2, {("a", 0): 3}, {("a", 1)})


def test_a_partition_no_longer_fetched_is_forgotten_when_another_takes_its_place():
    # As many partitions as before: the forgotten one is found all the same.
    states = {A0: State(), A1: State(), B0: State()}
    client = started(states)
    b1 = TopicPartition("b", 1)
    states[b1] = State()

    request = client.request(wanted({A0: 0, A1: 0, b1: 0}, states))

    assert (request.session_epoch, sent(request), forgotten(request)) == (1, {("b", 1): 0}, {("b", 0)})


def test_a_partition_back_at_a_new_state_makes_the_next_fetch_full():
    # The leader would not send again the high watermark it last sent for the partition.
    states = {A0: State(), A1: State(), B0: State()}
    client = started(states)
    states[A1] = State()  # a new leader epoch, say

    request = client.request(wanted({A0: 0, A1: 0, B0: 0}, states))

    assert (request.session_id, request.session_epoch) == (9, 0)  # closes session 9, asks for another
    assert len(sent(request)) == 3


def test_a_session_error_or_a_failed_request_starts_over():
    states = {A0: State(), A1: State(), B0: State()}
    client = started(states)
    client.request(wanted({A0: 0, A1: 0, B0: 0}, states))

    assert not client.answered(ErrorCode.invalid_fetch_session_epoch, 0)
    assert client.request(wanted({A0: 0}, states))[:2] == (9, 0)
    client.answered(ErrorCode.none, 10)

    client.request(wanted({A0: 0}, states))
    assert not client.answered(ErrorCode.fetch_session_id_not_found, 0)
    assert client.request(wanted({A0: 0}, states))[:2] == (0, 0)  # nothing left to close
    client.answered(ErrorCode.none, 11)

    client.request(wanted({A0: 0}, states))
    client.start_over()  # the request failed: its answer may have moved the leader's epoch on
    assert client.request(wanted({A0: 0}, states))[:2] == (11, 0)


def test_a_leader_without_a_session_for_us_gets_full_fetches():
    states = {A0: State(), A1: State(), B0: State()}
    client = FetchSessionClient()
    client.request(wanted({A0: 0}, states))
    client.answered(ErrorCode.none, 0)  # no slot free

    request = client.request(wanted({A0: 0}, states))

    assert (request.session_id, request.session_epoch, sent(request)) == (0, 0, {("a", 0): 0})


def test_an_unchanged_partitions_fetch_parameters_are_those_last_sent_and_a_changed_ones_new():
    states = {A0: State(), A1: State(), B0: State()}
    client = started(states)  # each sent as Wanted(state, 0, 5, 4, 0, 1 << 20)

    same = client.wanted(A0, states[A0], 0, 5, 4, 0, 1 << 20)
    moved = client.wanted(A1, states[A1], 3, 5, 4, 0, 1 << 20)
    new_state = client.wanted(B0, State(), 0, 5, 4, 0, 1 << 20)
    request = client.request({A0: same, A1: moved, B0: client.wanted(B0, states[B0], 0, 5, 4, 0, 1 << 20)})

    assert same is client.wanted(A0, states[A0], 0, 5, 4, 0, 1 << 20)  # what the session holds
    assert moved == Wanted(states[A1], 3, 5, 4, 0, 1 << 20) and new_state.state is not states[B0]
    assert sent(request) == {("a", 1): 3} and request.session_epoch == 1
