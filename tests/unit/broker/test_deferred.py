import asyncio

import pytest

from broker.deferred import Deferred


def test_its_waiter_is_called_with_it_when_its_value_comes_not_later():
    deferred, seen = Deferred(), []
    deferred.when_done(lambda done: seen.append(done.result()))
    assert seen == [] and not deferred.done()

    deferred.resolve("answer")

    assert seen == ["answer"] and deferred.done() and deferred.exception() is None


def test_a_waiter_that_comes_after_the_value_is_called_at_once():
    deferred, seen = Deferred(), []
    deferred.resolve(7)
    deferred.when_done(lambda done: seen.append(done.result()))
    assert seen == [7]


def test_a_failure_is_raised_by_result_and_told_by_exception():
    deferred, seen = Deferred(), []
    deferred.when_done(seen.append)
    failure = ValueError("bad")
    deferred.fail(failure)
    assert seen == [deferred] and deferred.exception() is failure
    with pytest.raises(ValueError):
        deferred.result()


def test_it_is_done_once_and_later_values_are_ignored():
    deferred, seen = Deferred(), []
    deferred.when_done(lambda done: seen.append(done.result()))
    deferred.resolve(1)
    deferred.resolve(2)
    deferred.fail(ValueError())
    assert seen == [1] and deferred.result() == 1


def test_cancelling_tells_its_maker_and_not_its_waiter_and_no_value_comes_after():
    stopped, seen = [], []
    deferred = Deferred(lambda: stopped.append(True))
    deferred.when_done(seen.append)

    deferred.cancel()
    deferred.cancel()
    deferred.resolve("too late")

    assert stopped == [True] and seen == [] and deferred.cancelled() and deferred.done()
    with pytest.raises(asyncio.CancelledError):
        deferred.result()


def test_a_done_deferred_is_not_cancelled_and_its_maker_is_not_told():
    stopped = []
    deferred = Deferred(lambda: stopped.append(True))
    deferred.resolve(1)
    deferred.cancel()
    assert stopped == [] and not deferred.cancelled() and deferred.result() == 1


def test_it_has_one_waiter():
    deferred = Deferred()
    deferred.when_done(lambda done: None)
    with pytest.raises(RuntimeError):
        deferred.when_done(lambda done: None)


def test_it_can_be_awaited_and_an_awaiter_cancelled_cancels_it():
    async def scenario():
        loop = asyncio.get_running_loop()
        answered = Deferred()
        loop.call_soon(answered.resolve, "answer")
        assert await answered == "answer"

        failed = Deferred()
        loop.call_soon(failed.fail, KeyError("k"))
        with pytest.raises(KeyError):
            await failed

        stopped = []
        abandoned = Deferred(lambda: stopped.append(True))
        waiting = asyncio.ensure_future(abandoned)
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.sleep(0)
        return abandoned.cancelled() and stopped == [True]

    assert asyncio.run(scenario())
