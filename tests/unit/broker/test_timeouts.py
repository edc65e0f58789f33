import asyncio

import uvloop

from broker import timeouts as timeouts_module
from broker.timeouts import Timeouts


def test_a_timeout_calls_back_at_its_deadline_with_its_argument():
    async def scenario():
        loop = asyncio.get_running_loop()
        timeouts = Timeouts(loop)
        fired = []
        added_at = loop.time()
        timeouts.add(0.05, lambda argument: fired.append((argument, loop.time())), "the wait")
        await asyncio.sleep(0.2)
        return added_at, fired, len(timeouts)

    added_at, fired, live = asyncio.run(scenario())
    [(argument, at)] = fired
    assert argument == "the wait"
    assert at >= added_at + 0.05 - 0.001  # the loop's clock counts milliseconds
    assert live == 0


def test_a_cancelled_timeout_never_calls_back():
    async def scenario():
        timeouts = Timeouts(asyncio.get_running_loop())
        fired = []
        cancelled = timeouts.add(0.02, fired.append, "cancelled")
        timeouts.add(0.04, fired.append, "kept")
        timeouts.cancel(cancelled)
        timeouts.cancel(cancelled)  # twice: nothing more
        await asyncio.sleep(0.15)
        return fired

    assert asyncio.run(scenario()) == ["kept"]


def test_timeouts_fire_in_deadline_order_whatever_order_they_came_in():
    async def scenario():
        timeouts = Timeouts(asyncio.get_running_loop())
        fired = []
        timeouts.add(0.09, fired.append, "third")
        timeouts.add(0.03, fired.append, "first")  # earlier than the armed timer: re-armed
        timeouts.add(0.06, fired.append, "second")
        await asyncio.sleep(0.2)
        return fired

    assert asyncio.run(scenario()) == ["first", "second", "third"]


def test_a_callback_may_add_a_timeout_and_a_failing_one_stops_none_of_the_others(caplog):
    async def scenario():
        timeouts = Timeouts(asyncio.get_running_loop())
        fired = []

        def fail(_argument):
            raise RuntimeError("broken callback")

        def again(argument):
            fired.append(argument)
            if argument == "once":
                timeouts.add(0.02, again, "twice")
                # Due at once: under uvloop, call_at then answers a plain Handle, not a TimerHandle.
                timeouts.add(0.0, again, "at once")

        timeouts.add(0.02, fail, None)
        timeouts.add(0.02, again, "once")
        timeouts.add(0.15, again, "last")
        await asyncio.sleep(0.3)
        return fired

    assert asyncio.run(scenario()) == ["once", "at once", "twice", "last"]
    assert "a timeout's callback failed" in caplog.text


def test_a_timeout_due_at_once_under_uvloop_raises_nothing_in_the_loop():
    # uvloop's call_at gives a plain Handle for a deadline already reached; the compiled module
    # once refused it when reading its timer back (a TypeError in the loop's timer callback).
    errors = []

    async def scenario():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        timeouts = Timeouts(loop)
        fired = []

        def again(argument):
            fired.append(argument)
            if argument == "first":
                timeouts.add(0.0, fired.append, "at once")

        timeouts.add(0.01, again, "first")
        timeouts.add(0.1, again, "later")
        await asyncio.sleep(0.25)
        return fired

    assert uvloop.run(scenario()) == ["first", "at once", "later"]
    assert errors == []


def test_ended_timeouts_do_not_pile_up_in_the_heap():
    # A tailing consumer's long polls: each ends (woken by an append) long before its timeout.
    async def scenario():
        timeouts = Timeouts(asyncio.get_running_loop())
        sizes = []
        for _ in range(10_000):
            timeouts.cancel(timeouts.add(30.0, lambda _: None, None))
            sizes.append(timeouts.entries)
        live = timeouts.add(30.0, lambda _: None, None)
        timeouts.close()
        return max(sizes), len(timeouts), live.live

    most, live_count, still_live = asyncio.run(scenario())
    assert most <= 2 * 1 + timeouts_module._SLACK + 1
    assert (live_count, still_live) == (0, False)
