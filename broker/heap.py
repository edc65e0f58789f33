"""The broker process's long-lived objects, kept out of the cyclic garbage collector's way.

A broker holding 10,000 partitions has some 650,000 objects that live as long as their
partitions: logs, segments, indexes, partition and fetch states. CPython's full collection
visits every one of them, about 0.4 s with the event loop stopped, and an idle three-broker
cluster had each broker run one every three seconds: objects that outlive a follower's long
poll (500 ms) reach the oldest generation, and once they are a quarter of it a full collection
follows (benchmarks/RESULTS.md, "an idle cluster of 10,000 partitions").

`gc.freeze()` moves every object alive at that moment into a permanent generation that
collections skip. The broker freezes once it has started (its logs loaded), and again after a
full collection that took longer than `slow_ms` (50 ms: many new partitions, say), at most once
per `interval_s` (10 s). Each refreeze first unfreezes and collects everything, one pause as long
as one of those it saves, so that cycles among objects that died while frozen (a deleted topic's
log, say) are freed then: until that refreeze they hold their memory. The interval bounds what
refreezes cost while partitions keep coming (each scans the frozen objects too).

While the broker starts, the collector is off (`hold`, until `start`): loading 10,000
partitions' logs brought nine full collections, 1.2 s of a restart's 9-10 s, each finding about
ten objects to free, as nearly everything made then lives as long as its partition. The freeze
at start collects once, which frees the few cycles starting left (some 3,200 objects there).

The youngest generation is collected after `YOUNGEST_THRESHOLD` (10,000) net allocations of
tracked objects instead of CPython's 700. A fetch of a session's thousands of partitions builds
an answer for each, and a long poll keeps them until it answers: at 700 every such fetch ran
collections of the youngest generation and the next, visiting those answers while they were
alive, about a twelfth of an idle replication round's instructions (`benchmarks.request_cost
--api idle-round --fetch-wait-ms 20`, benchmarks/RESULTS.md). The price is bounded: a collection
of the youngest generation visits at most about 10,000 objects, about half a millisecond, one of
the middle generation at most ten times as many, and only cycles wait longer to be freed.

Process-wide: the logway command (`broker.server.serve`) sets it up, so a broker embedded in
another process leaves that process's collector alone.

Not thread-safe, but safe to have running: the refreeze runs on the event loop, and the
collector's callback (on whichever thread a collection started) only schedules it there.
"""

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SLOW_MS = 50.0
INTERVAL_S = 10.0
YOUNGEST_THRESHOLD = 10_000


class LongLivedObjects:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        slow_ms: float = SLOW_MS,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._thresholds_before: tuple[int, ...] | None = None
        self._slow_s = slow_ms / 1000
        self._interval_s = interval_s
        self._clock = clock
        self._collection_started = 0.0
        self._last_freeze: float | None = None
        self._scheduled = False
        self._held = False
        self.freezes = 0

    def hold(self) -> None:
        """Turn the collector off until `start` (or `stop`): the broker is about to start."""
        if gc.isenabled():
            gc.disable()
            self._held = True

    def start(self) -> None:
        """Freeze what is alive, on the loop's next turn (what starting scheduled, such as the
        run for controller, goes first), and watch full collections from then on. The
        youngest generation's threshold is raised at once, and a collector that `hold` turned
        off is on again."""
        self._release()
        self._thresholds_before = thresholds = gc.get_threshold()
        gc.set_threshold(YOUNGEST_THRESHOLD, *thresholds[1:])
        self._scheduled = True
        self._loop.call_soon(self.freeze)
        gc.callbacks.append(self._on_collection)

    def stop(self) -> None:
        self._release()
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._thresholds_before is not None:
            gc.set_threshold(*self._thresholds_before)
            self._thresholds_before = None
        gc.unfreeze()

    def _release(self) -> None:
        if self._held:
            self._held = False
            gc.enable()

    def freeze(self) -> None:
        """Unfreeze, collect everything, and freeze what is left."""
        self._scheduled = True  # the collection below is this one's, no reason for another
        started = time.perf_counter()
        try:
            gc.unfreeze()
            freed = gc.collect()
            gc.freeze()
        finally:
            self._scheduled = False
        self._last_freeze = self._clock()
        self.freezes += 1
        # Not gc.get_freeze_count(): it walks every frozen object, 60 ms more of the loop held
        # with 10,000 partitions (a restart's profile).
        log.info("froze the long-lived objects in %.0f ms (%d freed)", (time.perf_counter() - started) * 1000, freed)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._collection_started = time.perf_counter()
            return
        took = time.perf_counter() - self._collection_started
        if took < self._slow_s or self._scheduled:
            return
        if self._last_freeze is not None and self._clock() - self._last_freeze < self._interval_s:
            return
        self._scheduled = True
        log.debug("a full collection took %.0f ms: freezing again", took * 1000)
        try:
            self._loop.call_soon_threadsafe(self.freeze)
        except RuntimeError:  # the loop is closed: nothing to keep fast any more
            self._scheduled = False
