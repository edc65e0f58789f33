"""A segment's .log (storage.records_file) against a model of its bytes, with appends deferred
(DeferredWrites, as a connection defers those of one read) or written at once, reads, regions,
truncations, and crashes. Reads and regions always see every append made, deferred or not; the
file on disk holds all of them whenever none waits; a crash loses only appends that wait (never
acknowledged: their answers leave after the finish), never one written before."""

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.records_file import DeferredWrites, RecordsFile


class RecordsFileMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.path = os.path.join(self.root, "00000000000000000000.log")
        self.writes = DeferredWrites(self._write_failed)
        self.records = RecordsFile.open(self.path)
        self.model = b""  # every byte appended
        self.written = b""  # what a crash keeps: the bytes written before the last deferral began

    @staticmethod
    def _write_failed(path: str, exc: OSError) -> None:
        raise AssertionError(f"a deferred write to {path} failed: {exc}")

    @precondition(lambda self: not self.writes.deferring)
    @rule()
    def start(self):
        self.writes.start()

    @precondition(lambda self: self.writes.deferring)
    @rule()
    def finish(self):
        self.writes.finish()
        self.written = self.model

    @rule(data=st.binary(min_size=1, max_size=200))
    def append(self, data):
        assert self.records.append(data, self.writes) == len(self.model)
        self.model += data
        if not self.writes.deferring:
            self.written = self.model

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read(self, data):
        position = data.draw(st.integers(0, len(self.model) - 1))
        length = data.draw(st.integers(1, len(self.model) - position))
        assert self.records.read(position, length) == self.model[position : position + length]

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def region(self, data):
        position = data.draw(st.integers(0, len(self.model) - 1))
        length = data.draw(st.integers(1, len(self.model) - position))
        assert self.records.region(position, length).read() == self.model[position : position + length]

    @rule(data=st.data())
    def truncate(self, data):
        size = data.draw(st.integers(0, len(self.model)))
        self.records.truncate_to(size)
        self.model = self.model[:size]
        self.written = self.model[: min(len(self.written), size)] if self.writes.deferring else self.model

    @rule()
    def crash(self):
        # What the page cache holds stays; what waits in the process is gone with it.
        self.records = RecordsFile.open(self.path)
        self.writes = DeferredWrites(self._write_failed)
        with open(self.path, "rb") as f:
            on_disk = f.read()
        assert on_disk.startswith(self.written) and self.model.startswith(on_disk)
        self.model = self.written = on_disk

    @invariant()
    def size_is_every_append_and_the_disk_holds_them_when_none_waits(self):
        assert self.records.size == len(self.model)
        if not self.writes.deferring:
            with open(self.path, "rb") as f:
                assert f.read() == self.model

    def teardown(self):
        try:
            self.records.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


TestRecordsFileAgainstModel = RecordsFileMachine.TestCase
TestRecordsFileAgainstModel.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
