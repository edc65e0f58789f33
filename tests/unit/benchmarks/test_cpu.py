"""benchmarks.cpu: the core speed probe and the windows it finds at full speed."""

import os
import time

from benchmarks.cpu import CoreSpeedProbe, full_speed_windows


def test_windows_are_at_full_speed_only_when_every_loop_in_them_was_near_the_fastest():
    fast, slow = 0.001, 0.0018
    samples = [(0.0, fast), (0.1, fast), (0.2, fast), (0.3, fast),  # window 0: steady and fast
               (0.5, fast), (0.6, slow), (0.7, fast), (0.8, fast),  # window 1: slowed once
               (1.0, slow), (1.1, slow), (1.2, slow), (1.3, slow)]  # window 2: slow throughout

    windows, spread = full_speed_windows(samples, window_s=0.5, tolerance=1.15)

    assert windows == {0}
    assert spread == slow / fast


def test_a_steady_cpu_has_every_window_at_full_speed_and_no_spread():
    samples = [(i * 0.1, 0.001) for i in range(20)]

    assert full_speed_windows(samples, window_s=0.5) == ({0, 1, 2, 3}, 1.0)


def test_no_samples_no_windows():
    windows, spread = full_speed_windows([])

    assert windows == set() and spread != spread  # NaN: nothing was measured


def test_the_probe_times_its_loop_and_pins_only_its_own_thread():
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    probe = CoreSpeedProbe(cpu, period_s=0.01).start()
    time.sleep(0.3)
    samples = probe.stop()

    assert len(samples) >= 3
    assert all(seconds > 0 for _, seconds in samples)
    assert os.sched_getaffinity(0) == mine
