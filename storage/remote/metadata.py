"""Remote log metadata (KIP-405): which segments of a partition are in the remote store, for which
offsets and leader epochs, and in which state; and its records in __remote_log_metadata.

A remote segment goes through Kafka's states (RemoteLogSegmentState), each a record:

    COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED
             \\______________________________________/^

(a copy that never finished is deleted straight from COPY_SEGMENT_STARTED). A segment is readable
only once COPY_SEGMENT_FINISHED; a repeated state is accepted (a retry, or the record read back
after it was applied), any other transition refused (InvalidTransitionError). A partition's
remote data as a whole is deleted through RemotePartitionDeleteState (MARKED, STARTED, FINISHED).

Records: Kafka's serialized form (BytesApiMessageSerde: the api key and version as unsigned
varints, then the flexible-version message) of RemoteLogSegmentMetadataRecord (api key 0) and
RemotePartitionDeleteMetadataRecord (api key 2); RemoteLogSegmentMetadataUpdateRecord (api key 1)
is read too. logway writes a whole RemoteLogSegmentMetadataRecord (it carries the state) for every
state, keyed by the segment (`<topic id>:<topic>-<partition>:<segment id>`; partition deletions
by `<topic id>:<topic>-<partition>`), so that the topic can be compacted: the latest record of a
key says all there is to know of it, and a finished deletion is followed by a tombstone. Kafka
writes update records without keys to a topic it never compacts (retention -1), which grows for
ever (docs/tiered-storage.md).

`RemoteLogMetadataCache` is the view that replaying the records builds, on any replica: pure
state, owned by the event loop.
"""

import enum
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace

from protocol.errors import ProtocolError
from protocol.primitives import Reader, encode_uvarint

SEGMENT_RECORD_API_KEY = 0
SEGMENT_UPDATE_RECORD_API_KEY = 1
PARTITION_DELETE_RECORD_API_KEY = 2
_VERSION = 0
_INT8 = struct.Struct(">b")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class SegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_VALID_NEXT = {
    None: {SegmentState.COPY_SEGMENT_STARTED},
    SegmentState.COPY_SEGMENT_STARTED: {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.COPY_SEGMENT_FINISHED: {SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.DELETE_SEGMENT_STARTED: {SegmentState.DELETE_SEGMENT_FINISHED},
    SegmentState.DELETE_SEGMENT_FINISHED: set(),
}


class InvalidTransitionError(ValueError):
    """A segment state that may not follow the current one (Kafka's isValidTransition)."""


@dataclass(frozen=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's TopicIdPartition.toString
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RemoteSegmentMetadata:
    """One remote segment (Kafka's RemoteLogSegmentMetadata): offsets [start_offset, end_offset],
    `leader_epochs` the (epoch, start offset) pairs within it, the first clipped to start_offset."""

    partition: TopicIdPartition
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]
    size: int
    state: SegmentState
    custom_metadata: bytes | None = None

    def with_state(self, state: SegmentState, broker_id: int, now_ms: int) -> "RemoteSegmentMetadata":
        return replace(self, state=state, broker_id=broker_id, event_timestamp_ms=now_ms)

    @property
    def key(self) -> bytes:
        return f"{self.partition}:{self.segment_id}".encode()


@dataclass(frozen=True)
class SegmentStateUpdate:
    """Kafka's RemoteLogSegmentMetadataUpdateRecord (read, never written by logway)."""

    partition: TopicIdPartition
    segment_id: uuid.UUID
    broker_id: int
    event_timestamp_ms: int
    state: SegmentState
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class PartitionDeleteMetadata:
    partition: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: PartitionDeleteState

    @property
    def key(self) -> bytes:
        return str(self.partition).encode()


RemoteLogMetadata = RemoteSegmentMetadata | SegmentStateUpdate | PartitionDeleteMetadata


# ------------------------------------------------------------------------------ serialization


def _uuid(value: uuid.UUID) -> bytes:
    return value.bytes


def _topic_id_partition(tip: TopicIdPartition) -> bytes:
    name = tip.topic.encode()
    return encode_uvarint(len(name) + 1) + name + _uuid(tip.topic_id) + _INT32.pack(tip.partition) + b"\x00"


def _segment_id(tip: TopicIdPartition, segment_id: uuid.UUID) -> bytes:
    return _topic_id_partition(tip) + _uuid(segment_id) + b"\x00"


def _nullable_bytes(value: bytes | None) -> bytes:
    return b"\x00" if value is None else encode_uvarint(len(value) + 1) + value


def encode(metadata: RemoteSegmentMetadata | PartitionDeleteMetadata) -> bytes:
    """The record value, as Kafka's RemoteLogMetadataSerde writes it."""
    if isinstance(metadata, PartitionDeleteMetadata):
        return b"".join((
            encode_uvarint(PARTITION_DELETE_RECORD_API_KEY),
            encode_uvarint(_VERSION),
            _topic_id_partition(metadata.partition),
            _INT32.pack(metadata.broker_id),
            _INT64.pack(metadata.event_timestamp_ms),
            _INT8.pack(metadata.state),
            b"\x00",
        ))
    epochs = b"".join(_INT32.pack(epoch) + _INT64.pack(offset) + b"\x00" for epoch, offset in metadata.leader_epochs)
    return b"".join((
        encode_uvarint(SEGMENT_RECORD_API_KEY),
        encode_uvarint(_VERSION),
        _segment_id(metadata.partition, metadata.segment_id),
        _INT64.pack(metadata.start_offset),
        _INT64.pack(metadata.end_offset),
        _INT32.pack(metadata.broker_id),
        _INT64.pack(metadata.max_timestamp_ms),
        _INT64.pack(metadata.event_timestamp_ms),
        encode_uvarint(len(metadata.leader_epochs) + 1),
        epochs,
        _INT32.pack(metadata.size),
        _nullable_bytes(metadata.custom_metadata),
        _INT8.pack(metadata.state),
        b"\x00",
    ))


def _skip_tagged_fields(reader: Reader) -> None:
    for _ in range(reader.uvarint()):
        reader.uvarint()  # tag
        reader.take(reader.uvarint())


def _read_topic_id_partition(reader: Reader) -> TopicIdPartition:
    length = reader.uvarint() - 1
    if length < 0:
        raise ProtocolError("null topic name in remote log metadata")
    name = bytes(reader.take(length)).decode()
    topic_id = uuid.UUID(bytes=bytes(reader.take(16)))
    partition = reader.int32()
    _skip_tagged_fields(reader)
    return TopicIdPartition(topic_id, name, partition)


def _read_segment_id(reader: Reader) -> tuple[TopicIdPartition, uuid.UUID]:
    tip = _read_topic_id_partition(reader)
    segment_id = uuid.UUID(bytes=bytes(reader.take(16)))
    _skip_tagged_fields(reader)
    return tip, segment_id


def _read_nullable_bytes(reader: Reader) -> bytes | None:
    length = reader.uvarint() - 1
    return None if length < 0 else bytes(reader.take(length))


def decode(value: bytes | memoryview) -> RemoteLogMetadata:
    """A record value of __remote_log_metadata; ProtocolError when it is not one (an unknown api
    key, such as the snapshot records Kafka keeps in files, or a version newer than 0)."""
    reader = Reader(memoryview(value))
    api_key, version = reader.uvarint(), reader.uvarint()
    if version != _VERSION:
        raise ProtocolError(f"remote log metadata record version {version} is not known")
    if api_key == SEGMENT_RECORD_API_KEY:
        tip, segment_id = _read_segment_id(reader)
        start, end, broker, max_ts, event_ts = (
            reader.int64(), reader.int64(), reader.int32(), reader.int64(), reader.int64()
        )
        epochs = []
        for _ in range(reader.uvarint() - 1):
            epochs.append((reader.int32(), reader.int64()))
            _skip_tagged_fields(reader)
        size = reader.int32()
        custom = _read_nullable_bytes(reader)
        state = SegmentState(reader.int8())
        _skip_tagged_fields(reader)
        return RemoteSegmentMetadata(tip, segment_id, start, end, broker, max_ts, event_ts, tuple(epochs), size, state, custom)
    if api_key == SEGMENT_UPDATE_RECORD_API_KEY:
        tip, segment_id = _read_segment_id(reader)
        broker, event_ts = reader.int32(), reader.int64()
        custom = _read_nullable_bytes(reader)
        state = SegmentState(reader.int8())
        _skip_tagged_fields(reader)
        return SegmentStateUpdate(tip, segment_id, broker, event_ts, state, custom)
    if api_key == PARTITION_DELETE_RECORD_API_KEY:
        tip = _read_topic_id_partition(reader)
        broker, event_ts = reader.int32(), reader.int64()
        state = PartitionDeleteState(reader.int8())
        _skip_tagged_fields(reader)
        return PartitionDeleteMetadata(tip, broker, event_ts, state)
    raise ProtocolError(f"remote log metadata record api key {api_key} is not known")


# ---------------------------------------------------------------------------------- the view


class RemotePartitionState:
    """The remote segments of one partition (Kafka's RemoteLogMetadataCache), by segment id."""

    def __init__(self) -> None:
        self.segments: dict[uuid.UUID, RemoteSegmentMetadata] = {}
        self.delete_state: PartitionDeleteState | None = None
        self.delete_broker_id: int | None = None  # the broker deleting the partition's remote data

    def apply(self, metadata: RemoteSegmentMetadata | SegmentStateUpdate, replaying: bool = False) -> None:
        """Take one state of a segment. `replaying` the topic, a whole record of a segment not
        known yet is taken in any state: compaction keeps only the latest record of a segment."""
        current = self.segments.get(metadata.segment_id)
        state = None if current is None else current.state
        relaxed = replaying and current is None and isinstance(metadata, RemoteSegmentMetadata)
        if not relaxed and metadata.state != state and metadata.state not in _VALID_NEXT[state]:
            raise InvalidTransitionError(
                f"segment {metadata.segment_id} of {metadata.partition}: {metadata.state.name} may not follow "
                f"{'nothing' if state is None else state.name}"
            )
        if isinstance(metadata, SegmentStateUpdate):
            if current is None:
                raise InvalidTransitionError(f"segment {metadata.segment_id} of {metadata.partition} is not known")
            metadata = current.with_state(metadata.state, metadata.broker_id, metadata.event_timestamp_ms)
        if metadata.state is SegmentState.DELETE_SEGMENT_FINISHED:
            self.segments.pop(metadata.segment_id, None)
        else:
            self.segments[metadata.segment_id] = metadata

    def in_state(self, *states: SegmentState) -> list[RemoteSegmentMetadata]:
        """Segments in one of `states`, by start offset."""
        return sorted((s for s in self.segments.values() if s.state in states), key=lambda s: (s.start_offset, s.end_offset))

    @property
    def copied(self) -> list[RemoteSegmentMetadata]:
        """The readable segments (COPY_SEGMENT_FINISHED), by start offset."""
        return self.in_state(SegmentState.COPY_SEGMENT_FINISHED)

    def segment_for(self, offset: int) -> RemoteSegmentMetadata | None:
        """The readable segment holding `offset`, or the first after it (an offset in a gap
        that compaction or an aborted copy left); None past the last."""
        for segment in self.copied:
            if segment.end_offset >= offset:
                return segment
        return None

    @property
    def highest_copied_offset(self) -> int:
        """The last offset of the remote log (-1 when empty): copying goes on after it. Segments
        being deleted count, as their offsets were copied."""
        ends = [
            s.end_offset
            for s in self.segments.values()
            if s.state in (SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED)
        ]
        return max(ends, default=-1)

    @property
    def log_start_offset(self) -> int | None:
        copied = self.copied
        return copied[0].start_offset if copied else None

    @property
    def size(self) -> int:
        return sum(s.size for s in self.copied)


class RemoteLogMetadataCache:
    """Every partition's remote segments, as replaying __remote_log_metadata builds them."""

    def __init__(self) -> None:
        self.partitions: dict[TopicIdPartition, RemotePartitionState] = {}

    def state(self, tip: TopicIdPartition) -> RemotePartitionState:
        found = self.partitions.get(tip)
        if found is None:
            found = self.partitions[tip] = RemotePartitionState()
        return found

    def apply(self, metadata: RemoteLogMetadata, replaying: bool = False) -> None:
        """Take one record (InvalidTransitionError for a segment state that may not follow)."""
        if isinstance(metadata, PartitionDeleteMetadata):
            if metadata.state is PartitionDeleteState.DELETE_PARTITION_FINISHED:
                self.partitions.pop(metadata.partition, None)
            else:
                state = self.state(metadata.partition)
                state.delete_state, state.delete_broker_id = metadata.state, metadata.broker_id
            return
        self.state(metadata.partition).apply(metadata, replaying)

    def replay(self, values: Iterable[bytes | memoryview | None]) -> None:
        """Apply record values in log order; tombstones (None) and refused transitions are
        skipped, as a replica reading the topic skips them."""
        for value in values:
            if value is None:
                continue
            try:
                self.apply(decode(value), replaying=True)
            except (InvalidTransitionError, ProtocolError, ValueError):
                continue
