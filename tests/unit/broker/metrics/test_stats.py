"""The loop-owned counts behind the broker's metrics."""

from bisect import bisect_left

from hypothesis import given, strategies as st

from broker.metrics.stats import (
    LATENCY_BUCKETS_MS,
    BrokerTopicStats,
    Histogram,
    RequestStats,
    SendTimer,
    latency_bucket,
    request_name,
)


def test_histogram_buckets_are_cumulative_and_a_value_on_a_bound_falls_in_its_bucket():
    histogram = Histogram()
    for observed in (0.05, 1, 3, 10, 11, 40_000):
        histogram.observe(observed)
    cumulative = dict(histogram.cumulative())
    assert list(cumulative) == [repr(float(bound)) for bound in LATENCY_BUCKETS_MS] + ["+Inf"]
    assert (cumulative["0.1"], cumulative["1.0"], cumulative["5.0"], cumulative["10.0"]) == (1, 2, 3, 4)
    assert (cumulative["30000.0"], cumulative["+Inf"]) == (5, 6)
    assert (sum(histogram.counts), histogram.sum) == (6, 40_025.05)


def test_every_bound_and_its_neighbours_fall_in_the_bucket_bisect_left_gives():
    for bound in LATENCY_BUCKETS_MS:
        for value in (bound, bound * (1 - 1e-12), bound * (1 + 1e-12)):
            assert latency_bucket(value) == bisect_left(LATENCY_BUCKETS_MS, value), value


@given(st.floats(allow_nan=False))
def test_a_value_falls_in_the_bucket_bisect_left_gives(value):
    assert latency_bucket(value) == bisect_left(LATENCY_BUCKETS_MS, value)


def test_request_times_add_up_to_the_total_once_the_response_is_sent():
    stats = RequestStats()
    times = stats.record("Produce", 9, 1.0, 2.0, 4.0)
    assert times.by_version() == {9: 1}
    assert stats.record("Produce", 3, 0.0, 0.0, 0.0).by_version() == {3: 1, 9: 1}
    assert sum(times.total.counts) == 0
    SendTimer(times, 7.0).sent(0.008)
    assert (times.queue.sum, times.local.sum, times.remote.sum, times.send.sum, times.total.sum) == (1.0, 2.0, 4.0, 8.0, 15.0)


def test_forgotten_topics_keep_their_counts_in_the_retired_totals():
    stats = BrokerTopicStats()
    stats.appended("a", 0, 9, 100)
    stats.appended("b", 0, 0, 10)
    stats.retain({"b"})
    assert set(stats.topics) == {"b"}
    assert (stats.retired.messages_in, stats.retired.bytes_in, stats.retired.produce_requests) == (10, 100, 1)


def test_every_count_of_a_forgotten_topic_is_added_to_the_retired_totals():
    stats = BrokerTopicStats()
    stats.appended("a", 0, 1, 100)
    stats.append_failed("a", 7)
    stats.fetched("a", 30, failed=False)
    stats.fetched("a", 0, failed=True)
    stats.appended("gone", 0, 0, 5)
    stats.forget("gone")
    stats.forget("a")
    retired = stats.retired
    assert (retired.messages_in, retired.bytes_in, retired.bytes_rejected, retired.bytes_out) == (3, 105, 7, 30)
    assert (retired.produce_requests, retired.failed_produce_requests) == (3, 1)
    assert (retired.fetch_requests, retired.failed_fetch_requests) == (2, 1)


def test_request_names_are_kafkas():
    assert [request_name(n) for n in ("PRODUCE", "LIST_OFFSETS", "OFFSET_FOR_LEADER_EPOCH", "API_VERSIONS")] == [
        "Produce", "ListOffsets", "OffsetForLeaderEpoch", "ApiVersions",
    ]
