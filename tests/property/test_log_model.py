"""The partition log against a model (offset -> value): appends, rolls, DeleteRecords, retention
by size, clean restarts and crashes with a torn tail, with appends deferred as a connection
defers those of one read (storage.records_file.DeferredWrites) or written at once. After every
step with nothing deferred a consumer reading from the log start offset sees exactly the
model's records from there on."""

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.records_file import DeferredWrites
from storage.topic_partition import TopicPartition

TP = TopicPartition("model", 0)
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, retention_ms=-1)


class IndexWritesLater:  # a LogScheduler (InlineScheduler, compiled, takes no subclass)
    """InlineScheduler, except that the index entries an append leaves in memory wait for the
    machine's `scheduled_index_write`, as the log manager's timer makes them wait (and with
    them the appends that wait)."""

    def __init__(self) -> None:
        self._inline = InlineScheduler()

    def write_index_entries_soon(self, log) -> None:
        pass

    def __getattr__(self, name: str):
        return getattr(self._inline, name)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.writes = DeferredWrites(self._write_failed)
        self.log = self._load(clean=True, log_start_offset=0)
        self.model: dict[int, bytes] = {}

    @staticmethod
    def _write_failed(path: str, exc: OSError) -> None:
        raise AssertionError(f"a deferred write to {path} failed: {exc}")

    def _load(self, clean: bool, log_start_offset: int) -> Log:
        """Open the log as a restart does, with the log start offset the checkpoint would hold."""
        log = Log.load(
            f"{self.root}/{TP.dir_name}",
            TP,
            CONFIG,
            scheduler=IndexWritesLater(),
            log_start_offset=log_start_offset,
            had_clean_shutdown=clean,
        )
        log.high_watermark = log.log_end_offset
        log.deferred_writes = self.writes
        return log

    @rule()
    def scheduled_index_write(self):
        self.log.write_pending_index_entries()

    @precondition(lambda self: not self.writes.deferring)
    @rule()
    def defer_appends(self):
        self.writes.start()

    @precondition(lambda self: self.writes.deferring)
    @rule()
    def write_deferred_appends(self):
        self.writes.finish()

    @rule(values=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=5))
    def append(self, values):
        batch = bytearray(build_batch([Record(i, 1_000 + i, None, v) for i, v in enumerate(values)]))
        result = self.log.append_as_leader(memoryview(batch), 0)
        self.log.high_watermark = self.log.log_end_offset
        for i, value in enumerate(values):
            self.model[result.first_offset + i] = value

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def clean_restart(self):
        self.log.close()
        self.log = self._load(clean=True, log_start_offset=self.log.log_start_offset)

    # A crash while appends wait loses them, unanswered; which of them a roll or a read had
    # written already the model does not know.
    @precondition(lambda self: not self.writes.deferring)
    @rule(torn=st.binary(min_size=1, max_size=80))
    def crash_with_a_torn_tail(self, torn):
        path = self.log.active_segment.records.path
        with open(path, "ab") as f:
            f.write(torn)
        self.log = self._load(clean=False, log_start_offset=self.log.log_start_offset)

    @precondition(lambda self: self.log.high_watermark > self.log.log_start_offset)
    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.log.log_start_offset, self.log.high_watermark))
        self.log.delete_records_before(offset)

    @rule(limit=st.integers(0, 5000))
    def retention_by_size(self, limit):
        self.log.config = LogConfig(segment_bytes=1500, index_interval_bytes=200, retention_ms=-1, retention_bytes=limit)
        self.log.apply_retention()
        self.log.config = CONFIG

    @invariant()
    @precondition(lambda self: not self.writes.deferring)
    def consumer_sees_the_model(self):
        start = self.log.log_start_offset
        assert self.log.log_end_offset == (max(self.model) + 1 if self.model else 0)
        expected = [(o, v) for o, v in sorted(self.model.items()) if o >= start]
        assert read_all(self.log, start) == expected

    def teardown(self):
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def read_all(log: Log, offset: int) -> list[tuple[int, bytes]]:
    records = []
    while offset < log.high_watermark:
        data = log.read(offset, 4096, log.high_watermark, min_one_batch=True).read()
        for position, header in iter_batches(data):
            records += [
                (r.offset, r.value)
                for r in iter_records(data[position : position + header.size])
                if r.offset >= offset
            ]
        assert records and records[-1][0] >= offset, f"no record at or after {offset} was read"
        offset = records[-1][0] + 1
    return records


TestLogAgainstModel = LogMachine.TestCase
TestLogAgainstModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
