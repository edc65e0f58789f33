"""Message schemas: the class that describes each (API, version), and codecs for them.

kio generates one frozen dataclass per message version from Kafka's JSON message definitions,
with a native reader. Versions kio no longer ships (Kafka 4 removed them) are declared in
protocol.legacy in kio's style, so one reader and one writer serve both.

Handlers are written against a single class per API, the newest version they serve. `adapt`
rebuilds a request of any version as that class, and a response built as that class as the
version the client asked for, copying fields by name (nested entities recursively) and giving
fields the source lacks their schema default.
"""

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import INT16, INT32, encode_uvarint


class UnknownMessageError(LookupError):
    """No schema is known for this (API key, version)."""


@functools.cache
def request_type(api_key: int, version: int) -> type:
    return _schema(api_key, version, 0, load_request_schema)


@functools.cache
def response_type(api_key: int, version: int) -> type:
    return _schema(api_key, version, 1, load_response_schema)


def _schema(api_key: int, version: int, side: int, load: Callable[[int, int], type]) -> type:
    try:
        return load(api_key, version)
    except KioIndexError:
        pass
    # Only then protocol.legacy (no version is in both): building its hundred classes is a third
    # of logway-admin's start-up, and a tool speaking current versions never needs them.
    from protocol import legacy

    declared = legacy.MESSAGES.get((api_key, version))
    if declared is None:
        raise UnknownMessageError(f"no schema for api key {api_key} version {version}")
    return declared[side]


@functools.cache  # asked for every request: a cache hit costs no Python frame
def is_flexible(api_key: int, version: int) -> bool:
    """Whether this version uses compact types and tagged fields (and header v2 / v1)."""
    return request_type(api_key, version).__flexible__


def decode(entity_type: type, buf: memoryview, pos: int = 0) -> Any:
    buf, pos = _prepare(entity_type, buf, pos)
    try:
        # kio's reader takes only read-only buffers; the view costs no copy.
        entity, _size = _reader(entity_type)(buf.toreadonly(), pos)
    except Exception as exc:  # kio raises a variety of types on malformed input
        raise ProtocolError(f"malformed {entity_type.__name__}: {exc}") from exc
    return entity


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


_reader = functools.cache(entity_reader)
_writer = functools.cache(entity_writer)


# Three things kio's native reader gets wrong, handled by walking the message first as its
# schema lays it out: a compact array length of 2**31 or more makes it set out to allocate room
# for that many items, and the allocation failure aborts the whole process where any other bad
# length raises; an array the schema does not allow to be null comes back as None when its
# length is -1, which handlers then trip over; and a tagged field it does not know fails the
# whole message, where the protocol says readers skip unknown tags (newer clients may send
# them). The walk refuses an array claiming more items than bytes remain (every item takes at
# least one) and a null one where null is not allowed, and notes unknown tagged fields so they
# can be cut out before kio reads the message; it decides nothing else: what it cannot follow
# (or a truncated field) ends it, and kio's reader judges.

_FIXED_SIZES = {
    "int8": 1, "bool": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "uuid": 16,
}
_LEGACY_LENGTHS = {"string": INT16, "bytes": INT32, "records": INT32}


class _StopWalk(Exception):
    """The walk cannot follow the message further; kio's reader decides."""


def _prepare(entity_type: type, buf: memoryview, pos: int) -> tuple[memoryview, int]:
    """The message as kio may read it: checked, and without tagged fields kio does not know."""
    walker = _Walker(buf, pos, entity_type.__flexible__)
    try:
        _walk_entity(entity_type, walker)
    except _StopWalk:
        pass
    except ProtocolError as exc:
        raise ProtocolError(f"malformed {entity_type.__name__}: {exc}") from None
    if not walker.unknown_tags:
        return buf, pos
    return memoryview(_without_unknown_tags(buf, pos, walker.unknown_tags)), 0


def _without_unknown_tags(buf: memoryview, pos: int, sections: list) -> bytes:
    """A copy of the message from `pos` with the unknown tagged fields cut out and each tag
    count lowered to match."""
    out = bytearray()
    cursor = pos
    for count_start, count_end, kept, cut in sections:
        out += buf[cursor:count_start]
        out += encode_uvarint(kept)
        cursor = count_end
        for start, end in cut:
            out += buf[cursor:start]
            cursor = end
    out += buf[cursor:]
    return bytes(out)


class _Walker:
    __slots__ = ("buf", "pos", "end", "flexible", "unknown_tags")

    def __init__(self, buf: memoryview, pos: int, flexible: bool, end: int | None = None) -> None:
        self.buf, self.pos, self.flexible = buf, pos, flexible
        self.end = len(buf) if end is None else end
        # (count start, count end, tags kept, [(start, end) of each unknown tagged field])
        self.unknown_tags: list[tuple[int, int, int, list[tuple[int, int]]]] = []

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(5):
            if self.pos >= self.end:
                raise _StopWalk
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise _StopWalk

    def fixed(self, codec: struct.Struct) -> int:
        if self.pos + codec.size > self.end:
            raise _StopWalk
        (value,) = codec.unpack_from(self.buf, self.pos)
        self.pos += codec.size
        return value

    def skip(self, size: int) -> None:
        if size < 0 or self.pos + size > self.end:
            raise _StopWalk
        self.pos += size

    def count(self, what: str, nullable: bool) -> int:
        """An array's element count; -1 for null."""
        count = self.uvarint() - 1 if self.flexible else self.fixed(INT32)
        if count < 0 and not nullable:
            raise ProtocolError(f"{what}: null where an array is required")
        if count > self.end - self.pos:
            raise ProtocolError(f"{what}: array of {count} elements in {self.end - self.pos} bytes")
        return count


def _walk_entity(entity_type: type, walker: _Walker) -> None:
    fields, tagged = _layout(entity_type)
    for name, walk in fields:
        if walk.__class__ is int:
            walker.skip(walk)  # a run of fixed-size fields
        else:
            walk(walker, name)
    if not walker.flexible:
        return
    count_start = walker.pos
    count = walker.uvarint()
    count_end = walker.pos
    unknown = []
    for _ in range(count):
        field_start = walker.pos
        tag = walker.uvarint()
        size = walker.uvarint()
        start = walker.pos
        walker.skip(size)
        if tag in tagged:
            name, walk = tagged[tag]
            # Unknown tags inside a known tagged field would also change that field's size;
            # this nested walk keeps its notes to itself, and kio judges such a message.
            walk(_Walker(walker.buf, start, True, start + size), name)
        else:
            unknown.append((field_start, walker.pos))
    if unknown:
        walker.unknown_tags.append((count_start, count_end, count - len(unknown), unknown))


@functools.cache
def _layout(entity_type: type) -> tuple[list, dict]:
    """(name, walk) of the fields in wire order, consecutive fixed-size fields merged into one
    byte count; and the tagged fields by tag."""
    hints = typing.get_type_hints(entity_type)
    fields: list = []
    tagged = {}
    for f in dataclasses.fields(entity_type):
        name = f"{entity_type.__name__}.{f.name}"
        kafka_type = f.metadata.get("kafka_type")
        if "tag" in f.metadata:
            tagged[f.metadata["tag"]] = (name, _field_walk(hints[f.name], kafka_type))
        elif kafka_type in _FIXED_SIZES and not _is_array(hints[f.name]):
            size = _FIXED_SIZES[kafka_type]
            if fields and fields[-1][1].__class__ is int:
                fields[-1] = (fields[-1][0], fields[-1][1] + size)
            else:
                fields.append((name, size))
        else:
            fields.append((name, _field_walk(hints[f.name], kafka_type)))
    return fields, tagged


def _is_array(hint: Any) -> bool:
    """An array field, nullable ones included (`tuple[...] | None`)."""
    return any(typing.get_origin(member) is tuple for member in _union_members(hint))


def _field_walk(hint: Any, kafka_type: str | None) -> Callable[[_Walker, str], None]:
    members = [m for m in _union_members(hint) if m is not type(None)]
    nullable = len(members) < len(_union_members(hint))
    inner = members[0] if len(members) == 1 else None
    if typing.get_origin(inner) is tuple:
        element = _field_walk(typing.get_args(inner)[0], kafka_type)

        def walk_array(walker: _Walker, name: str) -> None:
            for _ in range(walker.count(name, nullable)):
                element(walker, name)

        return walk_array
    if dataclasses.is_dataclass(inner) and not nullable:
        return lambda walker, _name: _walk_entity(inner, walker)
    if kafka_type in _FIXED_SIZES:
        size = _FIXED_SIZES[kafka_type]
        return lambda walker, _name: walker.skip(size)
    if kafka_type in _LEGACY_LENGTHS:
        legacy_length = _LEGACY_LENGTHS[kafka_type]

        def walk_length_prefixed(walker: _Walker, _name: str) -> None:
            length = walker.uvarint() - 1 if walker.flexible else walker.fixed(legacy_length)
            walker.skip(max(length, 0))

        return walk_length_prefixed
    return _stop  # a nullable struct, or a type this walk does not know


def _stop(_walker: _Walker, _name: str) -> None:
    raise _StopWalk


def adapt(entity: Any, target: type) -> Any:
    """`entity` rebuilt as `target`, another version of the same message."""
    if type(entity) is target:
        return entity
    values = {}
    for plan in _plan(type(entity), target):
        if plan.present:
            values[plan.name] = plan.convert(getattr(entity, plan.name))
        else:
            values[plan.name] = plan.default()
    return target(**values)


@dataclasses.dataclass(frozen=True)
class _FieldPlan:
    name: str
    present: bool
    convert: Callable[[Any], Any]
    default: Callable[[], Any]


@functools.cache
def _plan(source: type, target: type) -> tuple[_FieldPlan, ...]:
    source_fields = {f.name for f in dataclasses.fields(source)}
    hints = typing.get_type_hints(target)
    return tuple(
        _FieldPlan(
            name=field.name,
            present=field.name in source_fields,
            convert=_converter(hints[field.name]),
            default=_default_factory(field, hints[field.name]),
        )
        for field in dataclasses.fields(target)
    )


def _converter(hint: Any) -> Callable[[Any], Any]:
    entity, is_array = _nested_entity(hint)
    if entity is None:
        return _identity
    if is_array:
        return lambda items: None if items is None else tuple(adapt(i, entity) for i in items)
    return lambda item: None if item is None else adapt(item, entity)


def _identity(value: Any) -> Any:
    return value


def _nested_entity(hint: Any) -> tuple[type | None, bool]:
    """(entity class, whether it is an array of them) for a field's type hint."""
    for candidate in _union_members(hint):
        if typing.get_origin(candidate) is tuple:
            (element, _ellipsis) = typing.get_args(candidate)
            if dataclasses.is_dataclass(element):
                return element, True
        elif dataclasses.is_dataclass(candidate):
            return candidate, False
    return None, False


def _union_members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


_ZERO_BY_KAFKA_TYPE: dict[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "float64": 0.0,
    "uuid": uuid.UUID(int=0),
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def _default_factory(field: dataclasses.Field, hint: Any) -> Callable[[], Any]:
    """The value a field takes when the source version does not have it."""
    if field.default is not dataclasses.MISSING:
        return lambda: field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory
    if type(None) in _union_members(hint):
        return lambda: None
    entity, is_array = _nested_entity(hint)
    if is_array or typing.get_origin(hint) is tuple:
        return tuple
    if entity is not None:
        return lambda: _all_defaults(entity)
    zero = _ZERO_BY_KAFKA_TYPE.get(field.metadata.get("kafka_type"), 0)
    return lambda: zero


def _all_defaults(entity: type) -> Any:
    hints = typing.get_type_hints(entity)
    return entity(
        **{f.name: _default_factory(f, hints[f.name])() for f in dataclasses.fields(entity)}
    )


# --------------------------------------------------------------------------------------------
# Error responses
# --------------------------------------------------------------------------------------------

# Response arrays answer request arrays of other names: (response name -> request names).
_ANSWERS = {
    "responses": ("topics", "topic_data", "resources", "topic_names"),
    "partition_responses": ("partitions", "partition_data"),
    # "a+b": the names of the entries of both, once each (AlterUserScramCredentials' users).
    "results": ("topics", "resources", "groups_names", "creations", "deletions+upsertions", "dirs.topics"),
    "filter_results": ("filters",),
    "partitions": ("partition_data", "partition_indexes"),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "replica_election_results": ("topic_partitions",),
    "partition_result": ("partitions",),
    "members": ("members",),
    "groups": ("groups", "group_ids"),
    "topics": ("topics", "topic_names"),
    "markers": ("markers",),
    "partition_errors": ("partitions",),
    "coordinators": ("coordinator_keys",),
    "results_by_partition": ("partitions",),
    "transaction_states": ("transactional_ids",),
}
# Response fields that carry a request field of another name (the key of an entry).
_CARRIES = {
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "partition_index": ("partition_index", "partition", "index"),
    "index": ("index", "partition_index", "partition"),
    "partition": ("partition", "partition_index", "index"),
    "group_id": ("group_id", "group"),
    "topic_name": ("topic_name", "name"),
}
_STRING_TYPES = ("string",)
_INT_TYPES = ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")


def error_response(request: Any, target: type, error: ErrorCode) -> Any:
    """A response of class `target` answering `request` with `error` everywhere, as Kafka's
    `getErrorResponse` does: every error code is `error`, and the entries the request names
    (topics, partitions, groups, resources) are answered each with their keys; every other
    field takes its default. `request` may be any object with the request's fields as
    attributes (kio's or a hand-written parser's)."""
    hints = typing.get_type_hints(target)
    values = {}
    for field in dataclasses.fields(target):
        hint = hints[field.name]
        kafka_type = field.metadata.get("kafka_type")
        entity, is_array = _nested_entity(hint)
        if kafka_type == "error_code":
            values[field.name] = error
        elif entity is not None and is_array:
            values[field.name] = tuple(
                _answer(item, entity, error) for item in _answered_items(request, field.name)
            )
        elif entity is None and (value := _carried(request, field.name, kafka_type)) is not None:
            values[field.name] = value
        else:
            values[field.name] = _default_factory(field, hint)()
    return target(**values)


def _answered_items(request: Any, name: str) -> tuple:
    for source in (name, *_ANSWERS.get(name, ())):
        if "+" in source:
            lists = [getattr(request, part, None) for part in source.split("+")]
            if all(isinstance(items, (list, tuple)) for items in lists):
                return tuple(dict.fromkeys(item.name for items in lists for item in items))
            continue
        if "." in source:  # "a.b": the b entries of every a entry (AlterReplicaLogDirs' topics)
            outer, inner = source.split(".")
            entries = getattr(request, outer, None)
            if isinstance(entries, (list, tuple)):
                return tuple(item for entry in entries for item in getattr(entry, inner, ()))
            continue
        items = getattr(request, source, None)
        if isinstance(items, (list, tuple)):
            return tuple(items)
    return ()


def _answer(item: Any, entity: type, error: ErrorCode) -> Any:
    """An entry answering `item`: an entity of the request, or a bare key (a topic or group name,
    a partition index), which goes to the entry's first field of its type."""
    if isinstance(item, (str, int)):
        wanted = _STRING_TYPES if isinstance(item, str) else _INT_TYPES
        key = next(f.name for f in dataclasses.fields(entity) if f.metadata.get("kafka_type") in wanted)
        item = types.SimpleNamespace(**{key: item})
    return error_response(item, entity, error)


def _carried(request: Any, name: str, kafka_type: str | None) -> Any:
    for source in _CARRIES.get(name, (name,)):
        value = getattr(request, source, None)
        if kafka_type in _STRING_TYPES and isinstance(value, str):
            return value
        if kafka_type in _INT_TYPES and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kafka_type == "uuid" and isinstance(value, uuid.UUID):
            return value
    return None
