"""Client quotas: what a client may use, how much it used, how long to throttle it.

The semantics are those of Kafka's ClientQuotaManager with its DefaultQuotaCallback (3.9):

- A quota entity is a user, a client-id, or both; either may be `DEFAULT` (Kafka's <default>),
  the value for every user or client-id that has no quota of its own. For a request from user U
  with client-id C the most specific quota applies, in Kafka's order:
  /config/users/U/clients/C, /config/users/U/clients/<default>, /config/users/U,
  /config/users/<default>/clients/C, /config/users/<default>/clients/<default>,
  /config/users/<default>, /config/clients/C, /config/clients/<default>.
- Usage is shared by every connection the quota matches: a user quota by all of that user's
  clients, a client-id quota by every user with that client-id (Kafka's metric tags). As in
  Kafka, once quotas of some level were set the broker keeps sharing by that level until it
  restarts, even if they are removed.
- Usage is a rate (Kafka's Rate over a WindowedSum): the sum of what was recorded in the last
  quota.window.num samples of quota.window.size.seconds each, divided by the time they span
  (at least quota.window.num - 1 whole windows, so a new client cannot burst).
- A client over its quota is throttled for as long as it takes the rate to come back to the
  quota if nothing more were recorded: (rate - quota) / quota * the span measured
  (QuotaUtils.throttleTime). Byte-rate throttles are not bounded (Kafka bounds the bytes a fetch
  may take instead, `max_value_in_window`); request-time throttles are bounded by one window
  (ClientRequestQuotaManager).

Quota types, one ClientQuotaManager each: producer_byte_rate (bytes of produce requests),
consumer_byte_rate (bytes of fetch responses), request_percentage (handler time, in percent of
one thread: recording t seconds adds t * 100). Times are in milliseconds from an injected clock.
"""

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
# Kafka's types of the quota keys: byte rates are LONG, the request percentage DOUBLE.
QUOTA_KEYS: Final[Mapping[str, str]] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
}

INACTIVE_SENSOR_EXPIRATION_MS: Final = 3600 * 1000  # Kafka's InactiveSensorExpirationTimeSeconds


class _Default:
    """Kafka's <default> entity name: the quota of every user (or client-id) without its own."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT: Final = _Default()

Name = str | _Default


class QuotaEntity(NamedTuple):
    """A user, a client-id or both; None: the entity has no such part."""

    user: Name | None = None
    client_id: Name | None = None

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user {self.user!r}" if isinstance(self.user, str) else "default user")
        if self.client_id is not None:
            parts.append(f"client-id {self.client_id!r}" if isinstance(self.client_id, str) else "default client-id")
        return " and ".join(parts) or "no entity"


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """quota.window.num samples of quota.window.size.seconds each."""

    samples: int = 11
    window_ms: int = 1000


# ---------------------------------------------------------------------------------- rate


class _Sample:
    __slots__ = ("value", "event_count", "start_ms", "last_event_ms")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class Rate:
    """Kafka's Rate (per second) over a WindowedSum of `config.samples` samples, plus the one
    extra sample Kafka keeps for the window that overlaps the oldest."""

    __slots__ = ("_config", "_samples", "_current", "last_record_ms")

    def __init__(self, config: WindowConfig) -> None:
        self._config = config
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        self.last_record_ms = now_ms
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self._config.window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at `now_ms`."""
        self._purge_obsolete(now_ms)
        total = sum(sample.value for sample in self._samples)
        return total / (self.window_ms(now_ms) / 1000)

    def average(self, now_ms: int) -> float:
        """The mean of the values recorded in the window (Kafka's Avg over the same samples)."""
        self._purge_obsolete(now_ms)
        count = sum(sample.event_count for sample in self._samples)
        return sum(sample.value for sample in self._samples) / count if count else 0.0

    def window_ms(self, now_ms: int) -> int:
        """The span the rate is measured over: since the oldest sample began, and at least
        samples - 1 whole windows; at least 1 ms."""
        self._purge_obsolete(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(sample.start_ms for sample in self._samples)
        elapsed = now_ms - oldest
        full_windows = elapsed // self._config.window_ms
        minimum_full = self._config.samples - 1
        if full_windows < minimum_full:
            elapsed += (minimum_full - full_windows) * self._config.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % (self._config.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _purge_obsolete(self, now_ms: int) -> None:
        """Samples with no event in the last samples * window are reset (Kafka keeps those that
        overlap the monitored span, even if they began before it)."""
        expire_age = self._config.samples * self._config.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)


class SimpleRate(Rate):
    """Kafka's SimpleRate (replication quotas): measured over the span since the oldest
    sample began, at least one window, so a burst counts at once."""

    __slots__ = ()

    def window_ms(self, now_ms: int) -> int:
        self._purge_obsolete(now_ms)
        oldest = min((sample.start_ms for sample in self._samples), default=now_ms)
        return max(now_ms - oldest, self._config.window_ms)


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """How long until `rate`, measured over `window_ms`, is back to `bound` if nothing more is
    recorded (Kafka's QuotaUtils.throttleTime, rounded half up as Java's Math.round)."""
    return math.floor((rate - bound) / bound * window_ms + 0.5)


# ---------------------------------------------------------------------------------- manager

# Kafka's QuotaTypes: which levels of quotas were ever set (a bit each).
_CLIENT_ID_LEVEL: Final = 1
_USER_LEVEL: Final = 2
_USER_CLIENT_ID_LEVEL: Final = 4

Clock = Callable[[], int]


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ClientQuotaManager:
    """One quota type: the quotas set, and the usage of every client (by Kafka's metric tags)."""

    def __init__(
        self, window: WindowConfig, clock: Clock = monotonic_ms, max_throttle_ms: int | None = None
    ) -> None:
        self._window = window
        self._clock = clock
        self._max_throttle_ms = max_throttle_ms
        self._quotas: dict[QuotaEntity, float] = {}
        self._levels = 0
        self._rates: dict[tuple[str, str], Rate] = {}
        self._throttles: dict[tuple[str, str], Rate] = {}  # each request's throttle, for its average
        self._last_expiry_ms = clock()

    @property
    def enabled(self) -> bool:
        """Whether any quota of this type was ever set (Kafka's quotasEnabled: sticky until
        restart)."""
        return self._levels != 0

    def update(self, entity: QuotaEntity, bound: float | None) -> None:
        """Set (or, with None, remove) the quota of one entity."""
        if entity.user is not None:
            self._levels |= _USER_CLIENT_ID_LEVEL if entity.client_id is not None else _USER_LEVEL
        elif entity.client_id is not None:
            self._levels |= _CLIENT_ID_LEVEL
        if bound is None:
            self._quotas.pop(entity, None)
        else:
            self._quotas[entity] = bound

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to `user` (the principal's name) with `client_id`; None: none."""
        return self._limit(self._tags(user, client_id))

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """Record `value` for the client; the time to throttle it for, 0 when within its quota."""
        if not self.enabled:
            return 0
        now_ms = self._clock() if now_ms is None else now_ms
        tags = self._tags(user, client_id)
        rate = self._rate(tags, now_ms)
        rate.record(value, now_ms)
        bound = self._limit(tags)
        throttle = 0
        if bound is not None and (measured := rate.measure(now_ms)) > bound:
            throttle = throttle_time_ms(measured, bound, rate.window_ms(now_ms))
            if self._max_throttle_ms is not None:
                throttle = min(throttle, self._max_throttle_ms)
        throttles = self._throttles.get(tags)
        if throttles is None:
            throttles = self._throttles[tags] = Rate(self._window)
        throttles.record(throttle, now_ms)
        return throttle

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Record without checking the quota: a later request pays for it (Kafka's
        recordNoThrottle), or, with a negative value, take back what a throttled fetch did not
        send (unrecordQuotaSensor)."""
        if not self.enabled:
            return
        now_ms = self._clock() if now_ms is None else now_ms
        self._rate(self._tags(user, client_id), now_ms).record(value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without a certain throttle: the quota times
        samples - 1 windows (Kafka's getMaxValueInQuotaWindow, which caps a fetch's max_bytes)."""
        if not self.enabled:
            return math.inf
        bound = self.quota(user, client_id)
        if bound is None:
            return math.inf
        return bound * (self._window.samples - 1) * self._window.window_ms / 1000

    def usage(self, now_ms: int | None = None) -> list[tuple[str, str, float, float]]:
        """(user, client-id, rate per second, mean throttle in ms) of every client whose usage
        is kept (Kafka's per-client quota sensors), under the tags it is kept under."""
        now_ms = self._clock() if now_ms is None else now_ms
        rows = []
        for (user, client_id), rate in self._rates.items():
            throttles = self._throttles.get((user, client_id))
            rows.append((user, client_id, rate.measure(now_ms), throttles.average(now_ms) if throttles else 0.0))
        return rows

    # -------------------------------------------------------------- Kafka's DefaultQuotaCallback

    def _tags(self, user: str, client_id: str) -> tuple[str, str]:
        """(user, client-id) the usage is kept under (quotaMetricTags): "" for a part the
        matching quota does not name, so every client it matches shares one rate."""
        levels = self._levels
        if levels in (0, _CLIENT_ID_LEVEL):
            return "", client_id
        if levels == _USER_LEVEL:
            return user, ""
        if levels == _USER_CLIENT_ID_LEVEL:
            return user, client_id
        quotas = self._quotas
        if (
            QuotaEntity(user, client_id) in quotas
            or QuotaEntity(user, DEFAULT) in quotas
        ):
            return user, client_id
        if QuotaEntity(user, None) in quotas:
            return user, ""
        if QuotaEntity(DEFAULT, client_id) in quotas or QuotaEntity(DEFAULT, DEFAULT) in quotas:
            return user, client_id
        if QuotaEntity(DEFAULT, None) in quotas:
            return user, ""
        return "", client_id

    def _limit(self, tags: tuple[str, str]) -> float | None:
        """The quota for usage kept under `tags` (quotaLimit), most specific first."""
        user, client_id = tags
        get = self._quotas.get
        if user and client_id:
            for entity in (
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client_id),
                QuotaEntity(DEFAULT, DEFAULT),
            ):
                bound = get(entity)
                if bound is not None:
                    return bound
            return None
        if user:
            bound = get(QuotaEntity(user, None))
            return bound if bound is not None else get(QuotaEntity(DEFAULT, None))
        if client_id:
            bound = get(QuotaEntity(None, client_id))
            return bound if bound is not None else get(QuotaEntity(None, DEFAULT))
        return None

    def _rate(self, tags: tuple[str, str], now_ms: int) -> Rate:
        rate = self._rates.get(tags)
        if rate is None:
            self._expire_inactive(now_ms)
            rate = self._rates[tags] = Rate(self._window)
        return rate

    def _expire_inactive(self, now_ms: int) -> None:
        """Forget the usage of clients idle for an hour (Kafka expires their sensors)."""
        if now_ms - self._last_expiry_ms < INACTIVE_SENSOR_EXPIRATION_MS:
            return
        self._last_expiry_ms = now_ms
        for tags in [t for t, r in self._rates.items() if now_ms - r.last_record_ms >= INACTIVE_SENSOR_EXPIRATION_MS]:
            del self._rates[tags]
            self._throttles.pop(tags, None)


class ClientQuotas:
    """The quotas of every type, and the quota values set per entity (what DescribeClientQuotas
    answers)."""

    def __init__(self, window: WindowConfig = WindowConfig(), clock: Clock = monotonic_ms) -> None:
        self.window = window
        self.produce = ClientQuotaManager(window, clock)
        self.fetch = ClientQuotaManager(window, clock)
        # Kafka bounds request-time throttles by one window (ClientRequestQuotaManager).
        self.request = ClientQuotaManager(window, clock, max_throttle_ms=window.window_ms)
        self._managers = {
            PRODUCER_BYTE_RATE: self.produce,
            CONSUMER_BYTE_RATE: self.fetch,
            REQUEST_PERCENTAGE: self.request,
        }
        self.configs: dict[QuotaEntity, dict[str, float]] = {}

    @property
    def enabled(self) -> bool:
        """Whether any quota was ever set (until then requests record nothing). Asked for every
        request: the managers' `enabled`, read without their property calls."""
        return self.produce._levels != 0 or self.fetch._levels != 0 or self.request._levels != 0

    def set_entity(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """Make `values` the entity's quotas: keys missing from it are removed."""
        before = self.configs.get(entity, {})
        for key, manager in self._managers.items():
            if key in values:
                manager.update(entity, float(values[key]))
            elif key in before:
                manager.update(entity, None)
        if values:
            self.configs[entity] = {k: float(v) for k, v in values.items() if k in QUOTA_KEYS}
        else:
            self.configs.pop(entity, None)

    def replace_all(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Make `configs` the whole set of quotas (a store read at start or after a reconnect)."""
        for entity in set(self.configs) - set(configs):
            self.set_entity(entity, {})
        for entity, values in configs.items():
            self.set_entity(entity, values)
