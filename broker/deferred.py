"""A value that a later event supplies, handed at once to the one callback waiting for it.

A long-poll Fetch's answer is ready when an append wakes it (Kafka's DelayedFetch, completed by
whoever satisfied it). Through asyncio it went a task, two coroutines and three loop turns from
the append to the answer's send: every callback of an asyncio Future runs a turn after the
future is done (call_soon), and a Task adds a turn of its own to start. A Deferred calls its
callback when it is given its value, in the same turn, so the answer goes out with the send row
of the append that woke it (broker.network's SendRows). An acks=all Produce answers the same way
once its appends commit (Kafka's DelayedProduce).

The connection (broker.network) and the dispatcher (broker.dispatch) wait for one with
`when_done`; others (in-process serving, tests) can `await` it, which goes through an asyncio
future as any await does.

Like a Future: done once, with a value (`resolve`) or an exception (`fail`); `cancel` ends it
without either and tells whoever makes the value (`on_cancel`, given at creation), so that it
stops (a long poll stops watching its partitions). A callback is not called for a cancelled
Deferred: only its waiter cancels it, and the waiter knows. `result`, `exception` and
`cancelled` read it as a Future's are read, so a callback can take either.

Thread-safety: the event loop's, as a Future's.
"""

import asyncio
from collections.abc import Callable, Generator
from typing import Any, Final, Generic, TypeVar

_PENDING: Final = 0
_DONE: Final = 1
_CANCELLED: Final = 2

T = TypeVar("T")


class Deferred(Generic[T]):
    __slots__ = ("_state", "_value", "_exception", "_callback", "_on_cancel")

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._exception: BaseException | None = None
        self._callback: Callable[["Deferred[T]"], None] | None = None
        self._on_cancel = on_cancel

    def when_done(self, callback: Callable[["Deferred[T]"], None]) -> None:
        """Call `callback(self)` when it is done: at once if it is (then in the caller's turn).
        One callback: a Deferred has one waiter."""
        if self._callback is not None:
            raise RuntimeError("a Deferred has one waiter")
        if self._state == _DONE:
            callback(self)
        else:
            self._callback = callback

    def resolve(self, value: T) -> None:
        """Done with `value` (nothing, if it was cancelled); its waiter is called now."""
        if self._state != _PENDING:
            return
        self._value = value
        self._done()

    def fail(self, exception: BaseException) -> None:
        """Done with `exception`, which `result()` raises (nothing, if it was cancelled)."""
        if self._state != _PENDING:
            return
        self._exception = exception
        self._done()

    def _done(self) -> None:
        self._state = _DONE
        self._on_cancel = None
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(self)

    def cancel(self) -> None:
        """Ends it unless done, and tells its maker (`on_cancel`); its waiter is not called."""
        if self._state != _PENDING:
            return
        self._state = _CANCELLED
        self._callback = None
        on_cancel, self._on_cancel = self._on_cancel, None
        if on_cancel is not None:
            on_cancel()

    def done(self) -> bool:
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def exception(self) -> BaseException | None:
        """The exception it failed with (None when it has a value); only once done."""
        if self._state == _CANCELLED:
            raise asyncio.CancelledError()
        if self._state == _PENDING:
            raise asyncio.InvalidStateError("not done yet")
        return self._exception

    def result(self) -> T:
        exception = self.exception()
        if exception is not None:
            raise exception
        value: T = self._value
        return value

    def __await__(self) -> Generator[Any, None, T]:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.when_done(lambda done: _copy(done, future))
        future.add_done_callback(lambda waited: self.cancel() if waited.cancelled() else None)
        return future.__await__()


def _copy(done: Deferred[T], future: "asyncio.Future[T]") -> None:
    if future.cancelled():
        return
    exception = done.exception()
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(done.result())
