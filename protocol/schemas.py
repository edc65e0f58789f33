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
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from protocol import legacy
from protocol.errors import ErrorCode, ProtocolError


class UnknownMessageError(LookupError):
    """No schema is known for this (API key, version)."""


@functools.cache
def request_type(api_key: int, version: int) -> type:
    return _schema(api_key, version, 0, load_request_schema)


@functools.cache
def response_type(api_key: int, version: int) -> type:
    return _schema(api_key, version, 1, load_response_schema)


def _schema(api_key: int, version: int, side: int, load: Callable[[int, int], type]) -> type:
    declared = legacy.MESSAGES.get((api_key, version))
    if declared is not None:
        return declared[side]
    try:
        return load(api_key, version)
    except KioIndexError:
        raise UnknownMessageError(f"no schema for api key {api_key} version {version}") from None


def is_flexible(api_key: int, version: int) -> bool:
    """Whether this version uses compact types and tagged fields (and header v2 / v1)."""
    return request_type(api_key, version).__flexible__


def decode(entity_type: type, buf: memoryview, pos: int = 0) -> Any:
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
