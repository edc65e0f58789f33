import asyncio
import socket

import pytest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest

from broker.admin import command_config
from broker.admin.connection import Admin, AdminError, _Node, api_name, error_name, newest_known_version, parse_address
from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode


class _RecordingClient:
    """Answers every request with an empty response of the version it was sent as, and
    remembers that version."""

    address = "broker:9092"

    def __init__(self) -> None:
        self.sent = []

    async def send(self, api_key, version, request):
        self.sent.append((api_key, version))
        return schemas.error_response(request, schemas.response_type(api_key, version), ErrorCode.none)

    async def close(self):
        pass


def _admin_with(versions: dict) -> tuple[Admin, _RecordingClient]:
    admin = Admin("broker:9092", command_config.ClientSettings())
    client = _RecordingClient()
    admin._nodes[("broker", 9092)] = _Node(client, versions)
    admin._any = ("broker", 9092)
    return admin, client


def _describe_configs() -> DescribeConfigsRequest:
    return DescribeConfigsRequest(resources=(), include_synonyms=False, include_documentation=False)


def test_the_highest_version_both_sides_know_is_sent():
    admin, client = _admin_with({ApiKey.DESCRIBE_CONFIGS: (0, 2)})
    response = asyncio.run(admin.send(_describe_configs()))
    assert client.sent == [(ApiKey.DESCRIBE_CONFIGS, 2)]
    assert type(response).__version__ == 4  # adapted up to the version written against


def test_a_broker_serving_only_older_versions_than_needed_is_unsupported_version():
    admin, _ = _admin_with({ApiKey.DESCRIBE_CONFIGS: (0, 0)})
    with pytest.raises(AdminError, match="UNSUPPORTED_VERSION: the broker at broker:9092 serves versions 0-0"):
        asyncio.run(admin.send(_describe_configs(), min_version=1))


def test_an_api_the_broker_does_not_serve_is_unsupported_version_with_its_kafka_name():
    admin, _ = _admin_with({})
    with pytest.raises(AdminError, match="DescribeConfigs: UNSUPPORTED_VERSION"):
        asyncio.run(admin.send(_describe_configs()))


def test_names_are_kafkas():
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    assert api_name(35) == "DescribeLogDirs"
    assert api_name(9999) == "UNKNOWN(9999)"
    assert newest_known_version(ApiKey.METADATA) >= 12


def test_bootstrap_addresses_need_a_port():
    assert parse_address("[::1]:9092") == ("::1", 9092)
    with pytest.raises(AdminError, match="Invalid url"):
        parse_address("localhost")


def test_a_request_for_the_controller_is_sent_again_to_the_controller_named_next_when_the_first_cannot_be_reached():
    # A controller that died is still named by the metadata for a while (the test's broker 3).
    admin, client = _admin_with({ApiKey.DESCRIBE_CONFIGS: (0, 4)})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # nothing listens there once the socket is closed
    admin._addresses = {1: ("broker", 9092), 3: ("127.0.0.1", closed_port)}
    named = iter([3, 1])

    async def controller() -> int:
        return next(named)

    admin.controller = controller
    asyncio.run(admin.send_to_controller(_describe_configs()))
    assert client.sent == [(ApiKey.DESCRIBE_CONFIGS, 4)]
