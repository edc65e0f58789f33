"""The machine's own limits, measured in the same run as the broker: buffered sequential append
to a file (what a produce path can at best do), the same append of chunks received over loopback
from a sender process and checked with CRC-32C (what a produce path that receives, checks and
writes can at best do while its client shares the machine; on one thread, and with the write on a
thread of its own overlapping the next receive), os.sendfile of a page-cached file over
loopback (what a zero-copy fetch path can at best do), and CRC-32C implementations.
"""

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.records_file import RecordsFile

_RECV_CHUNK = 1024 * 1024
_SENDFILE_CHUNK = 4 * 1024 * 1024  # as broker.network sends file regions


@dataclass
class Throughput:
    bytes: int
    seconds: float
    timed_out: bool = False
    # CPU seconds over the timed span, where two processes share the work (receive_append_loopback)
    sender_cpu: float | None = None
    receiver_cpu: float | None = None

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def append_file(
    path: str, chunk_bytes: int, total_bytes: int, deadline_s: float = 60.0, reserve_ahead: bool = False
) -> Throughput:
    """`chunk_bytes` chunks appended to a new file at `path` until `total_bytes`, one pwrite each
    through logway's records file (storage.records_file); no fsync (page cache). The file is left
    for the caller to remove. With `reserve_ahead` the file reserves its blocks ahead of the
    appends, as an active segment's does.

    On this kind of VM the cost depends on where the page cache's new pages come from: pages
    the guest freed moments ago (a deleted file's) are cheap, while pages the hypervisor has
    to back first cost several times more CPU (see benchmarks/RESULTS.md). benchmarks.run
    measures both: a first append into a new file, then another right after deleting it."""
    from storage.records_file import RecordsFile

    chunk = os.urandom(chunk_bytes)
    records = RecordsFile.open(path)
    if records.size:
        records.truncate_to(0)
    records.reserve_ahead = reserve_ahead
    written = 0
    try:
        start = time.perf_counter()
        deadline = start + deadline_s
        timed_out = False
        while written < total_bytes:
            if time.perf_counter() > deadline:
                timed_out = True
                break
            records.append(chunk)  # one pwrite (after a reservation, now and then)
            written += chunk_bytes
        seconds = time.perf_counter() - start
    finally:
        records.close()
    return Throughput(written, seconds, timed_out)


def recycle_page_cache(path: str, total_bytes: int, chunk_bytes: int = 1024 * 1024) -> float:
    """Leave at least `total_bytes` of page-cache pages freed moments ago for the appends that
    come next: write a scratch file at `path` and delete it before it is written back (the
    dirty pages are dropped, so no disk I/O). Returns the seconds it took.

    On this VM appends into such pages cost 0.2-0.3 s of CPU per GB; appends into pages the
    guest has not used lately cost 1.4-3 s per GB (the hypervisor backs them first; the VM's
    balloon reports free memory to it), whatever writes them. A broker that has run a while has
    a full page cache and appends into pages it just reclaimed; librdkafka's mock keeps records
    in heap memory it reuses. Measured here, touching and freeing anonymous memory does not
    have the same effect: page-cache pages have to be freed."""
    chunk = b"\x00" * chunk_bytes
    started = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < total_bytes:
            written += os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(path)
    return time.perf_counter() - started


# The sender process: connects to the receiver's loopback port, sends one chunk of random bytes
# over and over until `total` bytes are out, then waits for the receiver's one-byte answer and
# prints the CPU seconds its sending took.
_SOURCE = """
import os, socket, sys, time
port, chunk_bytes, total = (int(arg) for arg in sys.argv[1:4])
chunk = os.urandom(chunk_bytes)
conn = socket.create_connection(("127.0.0.1", port), timeout=60)
started = time.process_time()
sent = 0
while sent < total:
    conn.sendall(chunk)
    sent += chunk_bytes
conn.shutdown(socket.SHUT_WR)
conn.recv(1)
print(time.process_time() - started, flush=True)
"""


def receive_append_loopback(
    path: str, chunk_bytes: int, total_bytes: int, deadline_s: float = 60.0, writer_thread: bool = False
) -> Throughput:
    """A produce path's own work with no broker around it: a sender process sends `chunk_bytes`
    chunks over loopback (as benchmarks.wire's client sends its batches), and this process
    receives each whole into a reused buffer (recv_into), computes its CRC-32C and appends it
    with one pwrite through logway's records file, into a new file at `path` that reserves its
    blocks ahead as an active segment's does; no fsync. Time runs from the accepted connection to
    the last append. The result has both processes' CPU seconds: the sender's, and the
    receiving side's over the timed span (with `writer_thread`, its two threads' together).

    By default the three steps run one after another on one thread while the sender has the
    other core, which is the most a two-core machine gives a broker whose clients run on it: the
    ratio of this to append_file (reserving ahead) is the ceiling of such a produce path against
    the bare append, and logway's 1 MiB-batch produce against this is its distance from that
    ceiling. With `writer_thread` the receive and the CRC overlap the write instead: a second
    thread appends the chunks in order, the receiving thread going on into the next buffer
    meanwhile (the broker-side shape of the writer threads issue 19 suggests; the CRC stays
    before the handover, as a broker must check a batch before it gives it offsets). The two
    against each other tell whether overlapping pays on this machine. The caller recycles
    page-cache pages first (recycle_page_cache) to append into the same kind as append_file, and
    removes the file."""
    import crc32c

    from storage.records_file import RecordsFile

    listener = socket.create_server(("127.0.0.1", 0))
    sender = subprocess.Popen(
        [sys.executable, "-c", _SOURCE, str(listener.getsockname()[1]), str(chunk_bytes), str(total_bytes)],
        stdout=subprocess.PIPE,
        text=True,
    )
    records = RecordsFile.open(path)
    if records.size:
        records.truncate_to(0)
    records.reserve_ahead = True  # as logway's active segment
    writer = _ChunkWriter(records, chunk_bytes) if writer_thread else None
    written = 0
    timed_out = False
    sender_cpu = receiver_cpu = None
    try:
        listener.settimeout(30)
        conn, _ = listener.accept()
        conn.settimeout(deadline_s)
        view = memoryview(bytearray(chunk_bytes))
        start, start_cpu = time.perf_counter(), time.thread_time()
        deadline = start + deadline_s
        with conn:
            while written < total_bytes:
                if time.perf_counter() > deadline:
                    timed_out = True
                    sender.kill()  # before the connection closes under its sendall
                    break
                if writer is not None:
                    view = writer.free_buffer()
                received = 0
                while received < chunk_bytes:
                    n = conn.recv_into(view[received:])
                    if n == 0:
                        raise ConnectionError(f"the sender stopped after {written + received:,} bytes")
                    received += n
                crc32c.crc32c(view)
                if writer is not None:
                    writer.append(view)
                else:
                    records.append(view)
                written += chunk_bytes
            writer_cpu = writer.finish() if writer is not None else 0.0
            seconds = time.perf_counter() - start
            if not timed_out:
                receiver_cpu = time.thread_time() - start_cpu + writer_cpu
                conn.sendall(b"k")
    finally:
        if writer is not None:
            writer.stop()
        records.close()
        listener.close()
        try:
            printed, _ = sender.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            sender.kill()
            printed, _ = sender.communicate()
    if not timed_out:
        sender_cpu = float(printed)
    return Throughput(written, seconds, timed_out, sender_cpu, receiver_cpu)


# Buffers between the receiving thread and the writer thread: one being written while the next
# is received. Two gave the overlap its best rates here (a throwaway run, 512 MiB a run: 0.87x
# the one thread with two, about 0.8x with three, 0.6-0.7x with five), as more of them no longer
# stay in the cores' 2 MiB caches. A broker reading one request ahead of the one it writes (as
# Kafka reads one request a connection at a time) holds the same two.
_OVERLAP_BUFFERS = 2


class _ChunkWriter:
    """receive_append_loopback's writer thread: appends the chunks handed to it in order, and
    hands each buffer back once written (at most _OVERLAP_BUFFERS out at a time)."""

    def __init__(self, records: "RecordsFile", chunk_bytes: int) -> None:
        self._records = records
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        self._written: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(_OVERLAP_BUFFERS):
            self._free.put(memoryview(bytearray(chunk_bytes)))
        self._cpu = 0.0
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="chunk-writer", daemon=True)
        self._thread.start()

    def free_buffer(self) -> memoryview:
        """A buffer to receive the next chunk into, once one is free."""
        buffer = self._free.get()
        if buffer is None:  # the writer failed
            raise RuntimeError("the writer thread failed") from self._failure
        return buffer

    def append(self, buffer: memoryview) -> None:
        self._written.put(buffer)

    def finish(self) -> float:
        """Waits for what was handed over to be written; the writer thread's CPU seconds."""
        self.stop()
        if self._failure is not None:
            raise RuntimeError("the writer thread failed") from self._failure
        return self._cpu

    def stop(self) -> None:
        """Ends the thread once what was handed over is written (at once if it failed)."""
        if self._thread.is_alive():
            self._written.put(None)
            self._thread.join()

    def _run(self) -> None:
        started = time.thread_time()
        try:
            while (buffer := self._written.get()) is not None:
                self._records.append(buffer)
                self._free.put(buffer)
        except BaseException as failure:
            self._failure = failure
            self._free.put(None)  # wakes a receiving thread waiting for a buffer
        finally:
            self._cpu = time.thread_time() - started


# The reader process: listens on a free loopback port, prints it, receives everything into a
# preallocated buffer with recv_into (dropping it), then acknowledges with one byte.
_SINK = """
import socket, sys
buffer_bytes, chunk = int(sys.argv[1]), int(sys.argv[2])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
listener.settimeout(30)
conn, _ = listener.accept()
conn.settimeout(60)
view = memoryview(bytearray(buffer_bytes))
pos = 0
while True:
    if pos + chunk > buffer_bytes:
        pos = 0
    n = conn.recv_into(view[pos : pos + chunk])
    if n == 0:
        break
    pos += n
conn.sendall(b"k")
"""


def sendfile_loopback(
    directory: str,
    file_bytes: int,
    total_bytes: int,
    buffer_bytes: int = 16 * 1024 * 1024,
    deadline_s: float = 60.0,
) -> Throughput:
    """os.sendfile of a page-cached file of `file_bytes` (repeatedly, up to `total_bytes`) to a
    reader process on loopback that recv_into()s a preallocated buffer, as benchmarks.wire's
    fetch reader does. Time runs until the reader has received everything. The file stays in
    `directory` for later calls (the caller removes the directory)."""
    path = os.path.join(directory, f"sendfile-{file_bytes}.bench")
    if not os.path.exists(path):  # made once and kept: later calls reuse it, page-cache hot
        with open(path + ".tmp", "wb") as f:
            block = os.urandom(1024 * 1024)
            for _ in range(max(1, file_bytes // len(block))):
                f.write(block)
        os.rename(path + ".tmp", path)
    file_bytes = os.path.getsize(path)
    with open(path, "rb") as f:  # warm the page cache
        while f.read(8 * 1024 * 1024):
            pass
    reader = subprocess.Popen(
        [sys.executable, "-c", _SINK, str(buffer_bytes), str(_RECV_CHUNK)], stdout=subprocess.PIPE, text=True
    )
    sent = 0
    try:
        port = int(reader.stdout.readline())
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.settimeout(None)  # blocking: os.sendfile on a timeout socket would raise EAGAIN
        fd = os.open(path, os.O_RDONLY)
        try:
            start = time.perf_counter()
            deadline = start + deadline_s
            timed_out = False
            while sent < total_bytes:
                if time.perf_counter() > deadline:
                    timed_out = True
                    break
                position = sent % file_bytes
                count = min(_SENDFILE_CHUNK, file_bytes - position, total_bytes - sent)
                sent += os.sendfile(sock.fileno(), fd, position, count)
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)
            seconds = time.perf_counter() - start
        finally:
            os.close(fd)
            sock.close()
    finally:
        try:
            reader.wait(10)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
        reader.stdout.close()
    return Throughput(sent, seconds, timed_out)


@dataclass
class CrcResult:
    crc32c_gb_s: float
    crcmod_gb_s: float | None
    crcmod_is_c: bool | None
    agree: bool | None

    @property
    def ratio(self) -> float | None:
        return self.crc32c_gb_s / self.crcmod_gb_s if self.crcmod_gb_s else None


def _rate(function, data: bytes, min_seconds: float, max_calls: int) -> float:
    calls = 0
    start = time.perf_counter()
    while calls < max_calls:
        function(data)
        calls += 1
        if time.perf_counter() - start >= min_seconds:
            break
    return calls * len(data) / (time.perf_counter() - start) / 1e9


def crc_speeds(size: int = 1024 * 1024, min_seconds: float = 0.5) -> CrcResult:
    """GB/s of CRC-32C over `size` bytes: the crc32c package vs crcmod's 'crc-32c'."""
    import crc32c

    data = os.urandom(size)
    fast = _rate(crc32c.crc32c, data, min_seconds, 100_000)
    try:
        import crcmod
        import crcmod.predefined
    except ImportError:
        return CrcResult(fast, None, None, None)
    slow_function = crcmod.predefined.mkCrcFun("crc-32c")
    try:
        import crcmod._crcfunext  # noqa: F401  (the C extension; without it crcmod is pure Python)

        is_c = True
    except ImportError:
        is_c = False
    slow = _rate(slow_function, data, min_seconds, 1_000)
    return CrcResult(fast, slow, is_c, slow_function(data) == crc32c.crc32c(data))
