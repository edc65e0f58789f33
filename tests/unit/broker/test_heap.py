"""Freezing the broker process's long-lived objects (broker.heap), against the real collector:
each test unfreezes what it froze."""

import asyncio
import gc
import weakref

import pytest

from broker.heap import YOUNGEST_THRESHOLD, LongLivedObjects


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def collected_sees(obj) -> bool:
    """Whether collections visit `obj` (gc.get_objects() leaves the frozen out)."""
    return any(o is obj for o in gc.get_objects())


def run_pending(loop) -> None:
    loop.run_until_complete(asyncio.sleep(0))


def test_starting_freezes_what_is_alive_and_stopping_unfreezes_it(loop):
    heap = LongLivedObjects(loop)
    try:
        alive = [Node()]
        heap.start()
        run_pending(loop)
        assert gc.get_freeze_count() > 0 and not collected_sees(alive)
    finally:
        heap.stop()
    assert gc.get_freeze_count() == 0


def test_a_slow_full_collection_freezes_again_at_most_once_an_interval(loop):
    clock = Clock()
    heap = LongLivedObjects(loop, slow_ms=0, interval_s=60, clock=clock)  # every collection is slow
    try:
        heap.start()
        run_pending(loop)
        gc.collect()
        run_pending(loop)
        assert heap.freezes == 1  # within the interval of the first

        clock.s += 61
        newer = [Node() for _ in range(1000)]
        gc.collect()
        run_pending(loop)
        assert heap.freezes == 2 and not collected_sees(newer)
        gc.collect()  # its own and later collections: within the interval again
        run_pending(loop)
        assert heap.freezes == 2
    finally:
        heap.stop()


def test_a_fast_full_collection_freezes_nothing(loop):
    clock = Clock()
    heap = LongLivedObjects(loop, slow_ms=60_000, interval_s=0, clock=clock)
    try:
        heap.start()
        run_pending(loop)
        gc.collect()
        run_pending(loop)
        assert heap.freezes == 1
    finally:
        heap.stop()


def test_cycles_that_died_frozen_are_freed_by_the_next_freeze(loop):
    heap = LongLivedObjects(loop)
    node = Node()
    dead = weakref.ref(node)
    try:
        heap.start()
        run_pending(loop)
        del node
        gc.collect()
        assert dead() is not None  # frozen: collections skip it

        heap.freeze()

        assert dead() is None
    finally:
        heap.stop()


def test_starting_raises_the_youngest_generations_threshold_and_stopping_restores_it(loop):
    before = gc.get_threshold()
    heap = LongLivedObjects(loop)
    try:
        heap.start()
        assert gc.get_threshold() == (YOUNGEST_THRESHOLD, *before[1:])
    finally:
        heap.stop()
    assert gc.get_threshold() == before


def test_holding_turns_the_collector_off_until_start(loop):
    heap = LongLivedObjects(loop)
    try:
        heap.hold()
        assert not gc.isenabled()
        heap.start()
        assert gc.isenabled()
    finally:
        heap.stop()
    assert gc.isenabled()


def test_stopping_a_held_heap_turns_the_collector_back_on(loop):
    heap = LongLivedObjects(loop)
    heap.hold()

    heap.stop()

    assert gc.isenabled()


def test_holding_leaves_a_collector_that_was_off_off(loop):
    heap = LongLivedObjects(loop)
    gc.disable()
    try:
        heap.hold()
        heap.start()
        assert not gc.isenabled()
    finally:
        heap.stop()
        gc.enable()


def test_a_cycle_that_died_while_held_lives_until_the_freeze_at_start_frees_it(loop):
    heap = LongLivedObjects(loop)
    try:
        heap.hold()
        node = Node()
        dead = weakref.ref(node)
        del node
        alive = [Node() for _ in range(3 * gc.get_threshold()[0])]  # enough for a collection
        assert dead() is not None and alive

        heap.start()
        run_pending(loop)

        assert dead() is None
    finally:
        heap.stop()
