import dataclasses
import datetime
import typing

import pytest
from kio.schema.metadata.v12.response import MetadataResponse, MetadataResponseTopic

from protocol import legacy, schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError


def test_legacy_versions_are_served_by_their_declared_classes():
    # Also that kio ships none of them: schemas asks kio first, so as not to import legacy.
    for (api_key, version), (request, response) in legacy.MESSAGES.items():
        assert schemas.request_type(api_key, version) is request
        assert schemas.response_type(api_key, version) is response


def test_unknown_version_has_no_schema():
    with pytest.raises(schemas.UnknownMessageError):
        schemas.request_type(ApiKey.METADATA, 999)


def test_flexibility_follows_the_version():
    assert not schemas.is_flexible(ApiKey.METADATA, 8)
    assert schemas.is_flexible(ApiKey.METADATA, 9)
    assert not schemas.is_flexible(ApiKey.CREATE_TOPICS, 1)


@pytest.mark.parametrize("version", [0, 1])
def test_legacy_create_topics_round_trips_and_adapts_up(version):
    request_type = schemas.request_type(ApiKey.CREATE_TOPICS, version)
    topic_type = typing.get_type_hints(request_type)["topics"].__args__[0]
    request = request_type(
        topics=(topic_type(name="t", num_partitions=3, replication_factor=1, assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=5),
    )
    decoded = schemas.decode(request_type, memoryview(schemas.encode(request)))
    assert decoded == request
    newest = schemas.adapt(decoded, schemas.request_type(ApiKey.CREATE_TOPICS, 7))
    assert newest.topics[0].name == "t" and newest.topics[0].num_partitions == 3
    assert newest.validate_only is False


def test_adapt_down_drops_fields_the_old_version_lacks():
    response = MetadataResponse(
        throttle_time=datetime.timedelta(milliseconds=5),
        brokers=(),
        cluster_id="c",
        controller_id=0,
        topics=(
            MetadataResponseTopic(
                error_code=ErrorCode.none, name="t", topic_id=None, is_internal=False, partitions=()
            ),
        ),
    )
    v0 = schemas.adapt(response, schemas.response_type(ApiKey.METADATA, 0))
    assert not hasattr(v0, "cluster_id")
    assert v0.topics[0].name == "t"
    assert schemas.encode(v0) == bytes.fromhex("00000000 00000001 0000 0001 74 00000000")


def test_adapt_up_fills_schema_defaults():
    v4 = schemas.request_type(ApiKey.FETCH, 4)
    body = bytes.fromhex("ffffffff 000001f4 00000001 00100000 00 00000000")
    newest = schemas.adapt(schemas.decode(v4, memoryview(body)), schemas.request_type(ApiKey.FETCH, 12))
    assert newest.max_bytes == 0x100000
    assert newest.session_epoch == -1 and newest.rack_id == ""


def test_decode_accepts_writable_buffers_and_reports_malformed_input():
    request_type = schemas.request_type(ApiKey.METADATA, 1)
    assert schemas.decode(request_type, memoryview(bytearray(b"\xff\xff\xff\xff"))).topics is None
    with pytest.raises(ProtocolError):
        schemas.decode(request_type, memoryview(b"\x00\x00\x00\x05"))


def test_unknown_tagged_fields_are_skipped_as_the_protocol_says():
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    request = MetadataRequest(
        topics=(
            MetadataRequestTopic(topic_id=None, name="a"),
            MetadataRequestTopic(topic_id=None, name="b"),
        ),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    plain = schemas.encode(request)
    # Each topic entry ends with an empty tag section (0x00); give the first topic two unknown
    # tags and the request itself one, as a newer client could.
    first_topic_end = plain.index(b"a") + 1
    with_tags = (
        plain[:first_topic_end]
        + bytes([2, 40, 1, 0xFF, 41, 0])
        + plain[first_topic_end + 1 : -1]
        + bytes([1, 99, 3, 1, 2, 3])
    )
    assert schemas.decode(MetadataRequest, memoryview(with_tags)) == request


def test_nullable_arrays_of_fixed_size_items_are_walked_as_arrays():
    """AlterPartitionReassignments' replicas: int32 items, null to cancel."""
    from kio.schema.alter_partition_reassignments.v0.request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )

    request = AlterPartitionReassignmentsRequest(
        timeout=datetime.timedelta(seconds=30),
        topics=(ReassignableTopic(name="t", partitions=(
            ReassignablePartition(partition_index=0, replicas=(2, 3)),
            ReassignablePartition(partition_index=1, replicas=None),
        )),),
    )
    assert schemas.decode(type(request), memoryview(schemas.encode(request))) == request


def _sample(entity: type):
    """A message of `entity` whose every array holds one item (a key, for arrays of keys) and
    whose every string names its field."""
    hints = typing.get_type_hints(entity)
    values = {}
    for field in dataclasses.fields(entity):
        hint = hints[field.name]
        nested, is_array = schemas._nested_entity(hint)
        if nested is not None:
            values[field.name] = (_sample(nested),) if is_array else _sample(nested)
            continue
        (member,) = [m for m in schemas._union_members(hint) if m is not type(None)]
        if typing.get_origin(member) is tuple:
            element = typing.get_args(member)[0]
            values[field.name] = ("key",) if issubclass(element, str) else (7,) if issubclass(element, int) else ()
        elif field.metadata.get("kafka_type") == "string":
            values[field.name] = field.name
        else:
            values[field.name] = schemas._default_factory(field, hint)()
    return entity(**values)


def _error_codes(entity) -> list:
    codes = []
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.metadata.get("kafka_type") == "error_code":
            codes.append(value)
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                codes += _error_codes(item)
    return codes


def _served_versions():
    from broker.handlers import HANDLERS

    return [(k, v) for k, h in sorted(HANDLERS.items()) for v in range(h.min_version, h.max_version + 1)]


@pytest.mark.parametrize("api_key, version", _served_versions())
def test_every_served_version_has_an_error_response_naming_the_requested_entries(api_key, version):
    request = _sample(schemas.request_type(api_key, version))
    response = schemas.error_response(request, schemas.response_type(api_key, version), ErrorCode.unknown_server_error)
    schemas.decode(type(response), memoryview(schemas.encode(response)))
    codes = _error_codes(response)
    assert codes and set(codes) == {ErrorCode.unknown_server_error}


def test_an_error_response_answers_each_requested_partition_by_its_keys():
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    request = FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic="a", partitions=(FetchPartition(partition=3, fetch_offset=0, partition_max_bytes=1),
                                                   FetchPartition(partition=5, fetch_offset=0, partition_max_bytes=1))),),
        forgotten_topics_data=(), rack_id="",
    )
    response = schemas.error_response(request, schemas.response_type(ApiKey.FETCH, 12), ErrorCode.unknown_server_error)
    assert response.error_code == ErrorCode.unknown_server_error
    (topic,) = response.responses
    assert topic.topic == "a"
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(3, ErrorCode.unknown_server_error), (5, ErrorCode.unknown_server_error)]
