"""Idempotent producers writing to a partition log, against a model of Kafka's sequence and epoch
rules: producers send batches, retry old ones, skip sequences, bump their epoch, start a new
epoch at the wrong sequence, write as fenced zombies; the log rolls, restarts cleanly and
crashes. Every answer must be the one the rules give, and the log must hold exactly the records
of the batches accepted, each once.

What the broker remembers of a producer is its last five batches, but after a restart it may
know fewer: the snapshot it reloads keeps each producer's last batch only, and replay adds back
those after the snapshot. So a retry of the last batch is always recognised, one of the last
five may be recognised (or refused as out of order), and an older one is always refused.
"""

import shutil
import tempfile
import time
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.record_batch import MAX_SEQUENCE, increment_sequence, iter_batches
from protocol.records import Record, build_batch, iter_records
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.producer_state import NUM_BATCHES_TO_RETAIN
from storage.topic_partition import TopicPartition

TP = TopicPartition("producers", 0)
CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=200, retention_ms=-1)
PRODUCER_IDS = (3, 17, 2**40)
FIRST_SEQUENCES = (0, 7, MAX_SEQUENCE - 2)


@dataclass
class SentBatch:
    first_seq: int
    values: list[bytes]
    first_offset: int


@dataclass
class ProducerModel:
    producer_id: int
    epoch: int = 0
    next_seq: int | None = None  # None: the broker has never taken a batch of this producer
    batches: list[SentBatch] = field(default_factory=list)  # accepted in the current epoch
    known_batches: int = 0  # how many of the last batches the broker surely remembers
    broker_epoch: int | None = None  # the epoch of the last accepted batch


class ProducerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.log = self._load(clean=True)
        self.records: list[bytes] = []  # the log's values, by offset
        self.producers: dict[int, ProducerModel] = {}
        self.counter = 0

    def _load(self, clean: bool, recovery_point: int = 0) -> Log:
        log = Log.load(
            f"{self.root}/{TP.dir_name}",
            TP,
            CONFIG,
            scheduler=InlineScheduler(),
            had_clean_shutdown=clean,
            recovery_point=recovery_point,
        )
        log.high_watermark = log.log_end_offset
        return log

    # ------------------------------------------------------------------------------ helpers

    def _values(self, count: int) -> list[bytes]:
        self.counter += count
        return [b"v%d" % (self.counter - count + i) for i in range(count)]

    def _append(self, producer: ProducerModel, first_seq: int, values: list[bytes], epoch=None):
        fields = dict(
            producer_id=producer.producer_id,
            producer_epoch=producer.epoch if epoch is None else epoch,
            base_sequence=first_seq,
        )
        return self._append_batch(values, **fields)

    def _append_batch(self, values: list[bytes], **producer_fields):
        now = int(time.time() * 1000)  # older timestamps would expire on reload
        records = [Record(i, now, None, v) for i, v in enumerate(values)]
        result = self.log.append_as_leader(memoryview(bytearray(build_batch(records, **producer_fields))), 0)
        self.log.high_watermark = self.log.log_end_offset
        return result

    def _accepted(self, producer: ProducerModel, first_seq: int, values: list[bytes], offset: int):
        assert offset == len(self.records)
        self.records += values
        producer.batches.append(SentBatch(first_seq, values, offset))
        producer.next_seq = increment_sequence(first_seq, len(values))
        producer.known_batches = min(producer.known_batches + 1, NUM_BATCHES_TO_RETAIN)
        producer.broker_epoch = producer.epoch

    def _refused(self, producer, first_seq, values, error, epoch=None) -> None:
        size = self.log.size_in_bytes
        try:
            self._append(producer, first_seq, values, epoch)
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert self.log.size_in_bytes == size

    # -------------------------------------------------------------------------------- rules

    @rule(producer=st.sampled_from(PRODUCER_IDS), count=st.integers(1, 4), start=st.sampled_from(FIRST_SEQUENCES))
    def send(self, producer, count, start):
        model = self._producer(producer)
        first_seq = start if model.next_seq is None else model.next_seq
        values = self._values(count)
        result = self._append(model, first_seq, values)
        self._accepted(model, first_seq, values, result.first_offset)

    @rule(count=st.integers(1, 3))
    def send_without_producer_id(self, count):
        values = self._values(count)
        result = self._append_batch(values)
        assert result.first_offset == len(self.records)
        self.records += values

    @rule(producer=st.sampled_from(PRODUCER_IDS), data=st.data())
    def retry(self, producer, data):
        model = self._producer(producer)
        if not model.batches:
            return
        age = data.draw(st.integers(1, len(model.batches)))  # 1: the last batch
        batch = model.batches[-age]
        size = self.log.size_in_bytes
        try:
            result = self._append(model, batch.first_seq, batch.values)
        except OutOfOrderSequenceError:
            assert age > model.known_batches, f"batch {age} from the end was forgotten"
        else:
            assert age <= NUM_BATCHES_TO_RETAIN, f"batch {age} from the end was remembered"
            assert result.first_offset == batch.first_offset
            assert result.last_offset == batch.first_offset + len(batch.values) - 1
        assert self.log.size_in_bytes == size

    @rule(producer=st.sampled_from(PRODUCER_IDS), skip=st.integers(1, 3))
    def skip_sequences(self, producer, skip):
        model = self._producer(producer)
        if not model.batches:
            return
        first_seq = increment_sequence(model.next_seq, skip)
        self._refused(model, first_seq, self._values(1), OutOfOrderSequenceError)

    @rule(producer=st.sampled_from(PRODUCER_IDS))
    def bump_epoch(self, producer):
        model = self._producer(producer)
        model.epoch += 1
        model.batches = []
        model.known_batches = 0
        if model.next_seq is not None:
            model.next_seq = 0  # a new epoch starts over

    @rule(producer=st.sampled_from(PRODUCER_IDS), first_seq=st.integers(1, 5))
    def new_epoch_not_at_zero(self, producer, first_seq):
        model = self._producer(producer)
        if model.broker_epoch is None or model.broker_epoch == model.epoch:
            return
        self._refused(model, first_seq, self._values(1), OutOfOrderSequenceError)

    @rule(producer=st.sampled_from(PRODUCER_IDS), seq=st.integers(0, 10))
    def zombie(self, producer, seq):
        model = self._producer(producer)
        if model.broker_epoch is None or model.broker_epoch == 0:
            return
        epoch = model.broker_epoch - 1
        self._refused(model, seq, self._values(1), InvalidProducerEpochError, epoch=epoch)

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def clean_restart(self):
        self.log.close()
        self.log = self._load(clean=True)
        self._forget_all_but_the_last_batch()

    @rule()
    def crash(self):
        self.log = self._load(clean=False, recovery_point=self.log.recovery_point)
        self._forget_all_but_the_last_batch()

    def _forget_all_but_the_last_batch(self):
        for model in self.producers.values():
            model.known_batches = min(model.known_batches, 1)

    @invariant()
    def the_log_holds_each_accepted_record_once(self):
        assert self.log.log_end_offset == len(self.records)
        assert read_values(self.log) == self.records

    def teardown(self):
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _producer(self, producer_id: int) -> ProducerModel:
        return self.producers.setdefault(producer_id, ProducerModel(producer_id))


def read_values(log: Log) -> list[bytes]:
    values, offset = [], 0
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 16, log.high_watermark, min_one_batch=True).read()
        for position, header in iter_batches(data):
            values += [r.value for r in iter_records(data[position : position + header.size])]
            offset = header.next_offset
    return values


TestProducersAgainstModel = ProducerMachine.TestCase
TestProducersAgainstModel.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
