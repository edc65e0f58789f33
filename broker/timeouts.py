"""The timeouts of the waits the replica manager keeps (long-poll fetches, delayed produces),
with one loop timer for all of them: Kafka's purgatory likewise keeps its delayed operations'
expirations in one timing wheel.

A `call_later` and its cancel for each wait cost about 5,500 instructions under uvloop (a
TimerHandle, a libuv timer started, stopped and closed, both freed), and nearly every wait ends
long before its timeout: a tailing consumer's long poll is woken by the next append. Here a
timeout is an entry in a heap, and the loop timer is armed for the earliest entry only: a new
entry re-arms it only when it comes first (the same wait again, a shorter one). An entry whose
wait ended stays in the heap until it reaches the top (where it is dropped unseen) or until
ended entries outnumber live ones by `_SLACK`, when the heap is rebuilt without them: the heap
holds at most about twice the live timeouts, however long the waits are.

Thread-safety: the event loop's only.
"""

import asyncio
import heapq
import logging
from collections.abc import Callable
from typing import Any, Final

log: Final = logging.getLogger(__name__)

# Ended entries allowed beyond the live ones before the heap is rebuilt without them. Small: a
# rebuild drops an ended entry for a few dozen instructions, a pop from the top for over a
# thousand (the heap's comparisons).
_SLACK: Final = 16
# A timer may fire up to this much before its deadline by the loop's clock (uvloop counts whole
# milliseconds): entries due by then are due now, or the timer would be armed again at once.
_RESOLUTION_S: Final = 0.001
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop


class Timeout:
    """One wait's timeout, from `Timeouts.add`: `callback(argument)` at its deadline unless
    cancelled first."""

    __slots__ = ("callback", "argument", "live")

    def __init__(self, callback: Callable[[Any], None], argument: Any) -> None:
        self.callback: Callable[[Any], None] | None = callback
        self.argument = argument
        self.live = True

    def end(self) -> None:
        """No callback; what it would have been called with is let go now, not when the
        entry leaves the heap."""
        self.live = False
        self.callback = None
        self.argument = None


class Timeouts:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop  # the loop the callbacks run on
        self._time: Callable[[], float] = loop.time
        self._heap: list[tuple[float, int, Timeout]] = []
        self._added = 0  # the entries' order among equal deadlines
        self._live = 0
        # What the loop's call_at returned: a TimerHandle, or under uvloop a plain Handle for a
        # deadline already reached (it calls soon instead), so typed loosely: a compiled read
        # checks the declared type, and uvloop's handles are not asyncio's classes.
        self._timer: Any = None
        self._timer_at = 0.0
        self._fire_callback: Callable[[], None] = self._fire  # bound once

    def add(self, delay_s: float, callback: Callable[[Any], None], argument: Any) -> Timeout:
        """Call `callback(argument)` `delay_s` from now, on the loop, unless cancelled."""
        deadline = self._time() + delay_s
        timeout = Timeout(callback, argument)
        self._added += 1
        heap = self._heap
        _heappush(heap, (deadline, self._added, timeout))
        self._live += 1
        if self._timer is None or deadline < self._timer_at:
            self._arm(deadline)
        elif len(heap) > 2 * self._live + _SLACK:
            self._drop_ended()
        return timeout

    def cancel(self, timeout: Timeout) -> None:
        """End `timeout` without its callback (nothing, once it fired or was cancelled)."""
        if timeout.live:
            timeout.end()
            self._live -= 1

    def close(self) -> None:
        """Cancel every timeout and the loop timer (shutdown)."""
        for _deadline, _added, timeout in self._heap:
            timeout.end()
        self._heap = []
        self._live = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        """The live timeouts."""
        return self._live

    @property
    def entries(self) -> int:
        """Entries in the heap, ended ones included (tests)."""
        return len(self._heap)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(deadline, self._fire_callback)
        self._timer_at = deadline

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        due = self._time() + _RESOLUTION_S
        while heap:
            deadline, _added, timeout = heap[0]
            if timeout.live and deadline > due:
                break
            _heappop(heap)
            callback = timeout.callback
            if timeout.live and callback is not None:
                argument = timeout.argument
                timeout.end()
                self._live -= 1
                try:
                    callback(argument)
                except Exception:  # one wait's failure must not keep the others waiting
                    log.exception("a timeout's callback failed")
        # A callback may have added a timeout, arming the timer for it.
        if heap and (self._timer is None or heap[0][0] < self._timer_at):
            self._arm(heap[0][0])

    def _drop_ended(self) -> None:
        heap = [entry for entry in self._heap if entry[2].live]
        heapq.heapify(heap)
        self._heap = heap
