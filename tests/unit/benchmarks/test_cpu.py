"""benchmarks.cpu: CPU time read from the kernel's clocks, the core speed probe and the windows it
finds at full speed."""

import os
import subprocess
import sys
import threading
import time

from benchmarks.cpu import CoreSpeedProbe, full_speed_windows, process_cpu, thread_cpu


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


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_process_cpu_is_read_to_below_a_clock_tick():
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.process_time() + 0.123\n"
                              "while time.process_time() < end: pass\nprint(flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # its spin is over
        spent = process_cpu(child.pid)
    finally:
        child.communicate("")

    assert 0.123 <= spent < 2.0
    assert spent * 100 != int(spent * 100)  # not a whole number of 10 ms ticks


def test_an_ended_process_reads_as_no_cpu():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()

    assert process_cpu(child.pid) == 0.0


def test_threads_are_read_by_name_and_only_they():
    spun = threading.Event()
    done = threading.Event()

    def work() -> None:
        # the kernel's name of the thread, as librdkafka names its own ("rdk:mock")
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("cpu-test-worker")
        _spin(0.05)
        spun.set()
        done.wait(10)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        spun.wait(10)
        theirs = thread_cpu("cpu-test-worker")
        nobody = thread_cpu("no-such-thread")
    finally:
        done.set()
        worker.join()

    assert 0.05 <= theirs < 1.0
    assert nobody == 0.0


def test_another_process_threads_are_read_by_name_to_below_a_clock_tick():
    # a mock cluster hosted by a process of its own: its thread's CPU clock is not readable from
    # here, the scheduler's runtime in /proc is
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                              "open('/proc/self/comm', 'w').write('cpu-test-child')\n"
                              "end = time.process_time() + 0.123\n"
                              "while time.process_time() < end: pass\nprint(flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # its spin is over
        theirs = thread_cpu("cpu-test-child", child.pid)
        nobody = thread_cpu("no-such-thread", child.pid)
    finally:
        child.communicate("")

    assert 0.123 <= theirs < 2.0
    assert theirs * 100 != int(theirs * 100)  # not a whole number of 10 ms ticks
    assert nobody == 0.0
