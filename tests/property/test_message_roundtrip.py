"""Every request and response schema of every served API version round-trips through the codec:
kio's generated classes and our legacy declarations alike. Strategies are derived from the
schema's own field metadata, so a new handler is covered without touching this file."""

import dataclasses
import datetime
import functools
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.handlers import HANDLERS
from protocol import legacy, schemas
from protocol.errors import ErrorCode

_INTEGERS = {
    "int8": 7, "int16": 15, "int32": 31, "int64": 63,
    "uint8": None, "uint16": None, "uint32": None, "uint64": None,
}


def _primitive(kafka_type: str) -> st.SearchStrategy:
    if kafka_type in _INTEGERS:
        bits = _INTEGERS[kafka_type]
        if bits is None:
            width = int(kafka_type[4:])
            return st.integers(0, 2**width - 1)
        return st.integers(-(2**bits), 2**bits - 1)
    return {
        "string": st.text(max_size=12),
        "bytes": st.binary(max_size=24),
        "records": st.binary(max_size=24),
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False, allow_infinity=False),
        "uuid": st.uuids(),
        "error_code": st.sampled_from(list(ErrorCode)),
        "timedelta_i32": st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        "timedelta_i64": st.integers(0, 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        "datetime_i64": st.integers(0, 2**42).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
        ),
    }[kafka_type]


@functools.cache
def entities(entity_type: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(entity_type)
    fields = {f.name: _field(f, hints[f.name]) for f in dataclasses.fields(entity_type)}
    return st.builds(entity_type, **fields)


def _field(field: dataclasses.Field, hint) -> st.SearchStrategy:
    members = schemas._union_members(hint)
    nullable = type(None) in members and "tag" not in field.metadata
    nested, is_array = schemas._nested_entity(hint)
    if nested is not None:
        element = st.deferred(lambda: entities(nested))
    elif "kafka_type" in field.metadata:
        element = _primitive(field.metadata["kafka_type"])
    else:
        raise AssertionError(f"no strategy for {field.name}: {hint}")
    array = is_array or any(typing.get_origin(m) is tuple for m in members)
    value = st.lists(element, max_size=3).map(tuple) if array else element
    if field.metadata.get("kafka_type") == "uuid" and not array:
        nullable = True
    return st.none() | value if nullable else value


def _schemas():
    """Every served version's schemas, and every schema declared in protocol.legacy (the
    inter-broker ones included, served or not)."""
    versions = {(h.api_key, v) for h in HANDLERS.values() for v in range(h.min_version, h.max_version + 1)}
    versions |= set(legacy.MESSAGES)
    for api_key, version in sorted(versions):
        yield schemas.request_type(api_key, version)
        yield schemas.response_type(api_key, version)


@pytest.mark.parametrize("schema", list(_schemas()), ids=lambda s: f"{s.__module__.split('.')[-2]}.{s.__name__}")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encode_then_decode_gives_the_same_message(schema, data):
    message = data.draw(entities(schema))
    encoded = schemas.encode(message)
    assert schemas.decode(schema, memoryview(encoded)) == message
