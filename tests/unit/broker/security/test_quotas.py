"""Rates, throttle times and quota precedence, with times given explicitly (no clock)."""

import math

import pytest

from broker.security.quotas import (
    DEFAULT,
    ClientQuotaManager,
    ClientQuotas,
    QuotaEntity,
    Rate,
    WindowConfig,
    throttle_time_ms,
)

KAFKA_WINDOWS = WindowConfig(samples=11, window_ms=1000)


def manager(max_throttle_ms: int | None = None) -> ClientQuotaManager:
    # The clock is never read: every call below passes its time.
    return ClientQuotaManager(KAFKA_WINDOWS, clock=lambda: 0, max_throttle_ms=max_throttle_ms)


def test_a_new_rate_is_measured_over_at_least_samples_minus_one_windows():
    rate = Rate(KAFKA_WINDOWS)
    rate.record(1000, now_ms=0)
    # One sample only: the span is stretched to 10 whole windows, so a first burst is averaged
    # over 10 s rather than 1 ms.
    assert rate.window_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)


def test_a_rate_spans_from_its_oldest_sample_once_that_is_longer():
    rate = Rate(KAFKA_WINDOWS)
    for second in range(11):
        rate.record(100, now_ms=second * 1000)
    assert rate.window_ms(10_500) == 10_500
    assert rate.measure(10_500) == pytest.approx(1100 / 10.5)


def test_samples_without_events_for_the_whole_span_are_forgotten():
    rate = Rate(KAFKA_WINDOWS)
    rate.record(5000, now_ms=0)
    assert rate.measure(10_999) > 0
    assert rate.measure(11_000) == 0


def test_throttle_time_is_the_time_to_return_to_the_quota_rounded_half_up():
    assert throttle_time_ms(600, 500, 10_500) == 2100
    # Java's Math.round: halves go up (Python's round would give 2).
    assert throttle_time_ms(350, 100, 1) == 3


def test_a_spike_after_steady_usage_is_throttled_as_kafka_throttles_it():
    # Kafka's ClientQuotaManagerTest.testQuotaViolation: 500 B/s for every client-id, 400 B a
    # second for 10 s, then 2300 B half a second later: 6300 B over 10.5 s is 600 B/s, which
    # takes (600 - 500) / 500 * 10.5 s = 2100 ms to come back to the quota.
    quotas = manager()
    quotas.update(QuotaEntity(None, DEFAULT), 500)
    now = 0
    for _ in range(10):
        assert quotas.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    now += 500
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "unknown", 2300, now) == 2100
    now += 2100
    for _ in range(10):
        quotas.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "unknown", 0, now) == 0


def test_usage_gives_each_clients_rate_and_mean_throttle_under_its_tags():
    quotas = manager()
    quotas.update(QuotaEntity(None, "slow"), 100)  # 100 B/s: over 10 s windows, 1000 B
    assert quotas.record_and_get_throttle_ms("alice", "slow", 1000, 0) == 0
    assert quotas.record_and_get_throttle_ms("alice", "slow", 1000, 0) == 10_000
    assert quotas.record_and_get_throttle_ms("bob", "fast", 5000, 0) == 0  # no quota: recorded, never throttled
    # Usage is kept under the tags of the quota level in use (client-id only here).
    assert sorted(quotas.usage(0)) == [("", "fast", 500.0, 0.0), ("", "slow", 200.0, 5000.0)]


def test_request_time_throttles_are_bounded_by_one_window():
    quotas = manager(max_throttle_ms=KAFKA_WINDOWS.window_ms)
    quotas.update(QuotaEntity(None, "busy"), 1.0)  # 1 % of a thread
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "busy", 500.0, 0) == 1000


def test_nothing_is_recorded_or_throttled_before_any_quota_is_set():
    quotas = manager()
    assert not quotas.enabled
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "c", 10**12, 0) == 0
    assert quotas.max_value_in_window("ANONYMOUS", "c") == math.inf


def test_a_client_without_a_matching_quota_is_never_throttled():
    quotas = manager()
    quotas.update(QuotaEntity(None, "slow"), 10)
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "fast", 10**9, 0) == 0
    assert quotas.record_and_get_throttle_ms("ANONYMOUS", "slow", 10**4, 0) > 0


# Kafka's eight levels, most specific first, for user "alice" with client-id "app".
LEVELS = [
    QuotaEntity("alice", "app"),
    QuotaEntity("alice", DEFAULT),
    QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "app"),
    QuotaEntity(DEFAULT, DEFAULT),
    QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"),
    QuotaEntity(None, DEFAULT),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_quota_applies(level):
    quotas = manager()
    # Every level from this one down is set, each to a different value: the first one wins.
    for index in range(level, len(LEVELS)):
        quotas.update(LEVELS[index], 1000 + index)
    assert quotas.quota("alice", "app") == 1000 + level


def test_removing_a_quota_brings_back_the_next_level():
    quotas = manager()
    quotas.update(QuotaEntity(None, DEFAULT), 100)
    quotas.update(QuotaEntity(None, "app"), 5000)
    assert quotas.quota("alice", "app") == 5000
    quotas.update(QuotaEntity(None, "app"), None)
    assert quotas.quota("alice", "app") == 100
    quotas.update(QuotaEntity(None, DEFAULT), None)
    assert quotas.quota("alice", "app") is None


def test_a_user_quota_is_shared_by_all_of_the_users_client_ids():
    quotas = manager()
    quotas.update(QuotaEntity("alice", None), 100)
    # 1000 B over the 10 s minimum span is exactly the quota; the next byte, from another
    # client-id of the same user, goes over it.
    assert quotas.record_and_get_throttle_ms("alice", "one", 1000, 0) == 0
    assert quotas.record_and_get_throttle_ms("alice", "two", 1, 0) > 0
    assert quotas.record_and_get_throttle_ms("bob", "two", 1000, 0) == 0


def test_a_client_id_quota_is_shared_by_every_user_with_that_client_id():
    quotas = manager()
    quotas.update(QuotaEntity(None, "app"), 100)
    assert quotas.record_and_get_throttle_ms("alice", "app", 1000, 0) == 0
    assert quotas.record_and_get_throttle_ms("bob", "app", 1, 0) > 0


def test_with_several_levels_set_each_client_is_kept_under_its_own_level():
    quotas = manager()
    quotas.update(QuotaEntity("alice", None), 100)
    quotas.update(QuotaEntity(None, "app"), 100)
    # alice's clients share alice's rate; bob's "app" clients share the client-id's.
    assert quotas.record_and_get_throttle_ms("alice", "app", 1000, 0) == 0
    assert quotas.record_and_get_throttle_ms("alice", "other", 1, 0) > 0
    assert quotas.record_and_get_throttle_ms("bob", "app", 1000, 0) == 0
    assert quotas.record_and_get_throttle_ms("carol", "app", 1, 0) > 0


def test_a_negative_record_takes_back_what_was_recorded():
    quotas = manager()
    quotas.update(QuotaEntity(None, "c"), 100)
    assert quotas.record_and_get_throttle_ms("u", "c", 5000, 0) > 0
    quotas.record_no_throttle("u", "c", -5000, 0)
    assert quotas.record_and_get_throttle_ms("u", "c", 1000, 0) == 0


def test_the_most_a_fetch_may_take_is_the_quota_over_samples_minus_one_windows():
    quotas = manager()
    quotas.update(QuotaEntity(None, "c"), 2048)
    assert quotas.max_value_in_window("u", "c") == 2048 * 10
    assert quotas.max_value_in_window("u", "other") == math.inf


def test_client_quotas_keep_each_entitys_values_and_apply_them_by_type():
    quotas = ClientQuotas(KAFKA_WINDOWS, clock=lambda: 0)
    entity = QuotaEntity(None, "app")
    quotas.set_entity(entity, {"producer_byte_rate": 1000, "request_percentage": 50})
    assert quotas.configs == {entity: {"producer_byte_rate": 1000.0, "request_percentage": 50.0}}
    assert quotas.produce.quota("u", "app") == 1000
    assert quotas.request.quota("u", "app") == 50
    assert quotas.fetch.quota("u", "app") is None
    quotas.set_entity(entity, {"consumer_byte_rate": 10})
    assert quotas.produce.quota("u", "app") is None
    assert quotas.fetch.quota("u", "app") == 10
    quotas.replace_all({})
    assert quotas.configs == {}
    assert quotas.fetch.quota("u", "app") is None
