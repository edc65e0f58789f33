"""broker.http.basic_auth and the listener's 401: HTTP users are the broker's SASL users."""

import asyncio
import base64

import aiohttp

from broker.http.basic_auth import BasicAuthenticator
from broker.security import scram
from broker.security.scram_store import Upsertion
from tests.unit.broker.http.conftest import http_broker

SALT = b"0123456789abcdef"
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'user_carol="carol-secret";'
)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def add_scram_user(broker, user: str, password: str) -> None:
    mechanism = scram.SCRAM_SHA_512
    salted = scram.salted_password(mechanism, password, SALT, 4096)
    await broker.scram_credentials.alter([Upsertion(user, mechanism.kafka_type, 4096, SALT, salted)], [])


def test_scram_and_plain_users_are_accepted_with_their_passwords_only(tmp_path):
    async def scenario():
        extra = {
            "http.authentication.method": "BASIC",
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        }
        async with http_broker(tmp_path, extra) as (broker, _session, _base):
            await add_scram_user(broker, "bob", "bob-secret")
            auth = BasicAuthenticator(broker)
            return [
                auth.principal(basic("bob", "bob-secret")),
                auth.principal(basic("bob", "bob-secret")),  # remembered
                auth.principal(basic("bob", "wrong")),
                auth.principal(basic("carol", "carol-secret")),
                auth.principal(basic("carol", "nope")),
                auth.principal(basic("dave", "x")),
                auth.principal("Bearer abc"),
                auth.principal(None),
            ]

    answers = [str(p) if p else None for p in asyncio.run(scenario())]
    assert answers == ["User:bob", "User:bob", None, "User:carol", None, None, None, None]


def test_a_request_without_valid_credentials_is_401_with_a_basic_challenge(tmp_path):
    async def scenario():
        async with http_broker(tmp_path, {"http.authentication.method": "BASIC"}) as (broker, session, base):
            await add_scram_user(broker, "bob", "bob-secret")
            anonymous = await session.get(f"{base}/v3/clusters")
            wrong = await session.get(f"{base}/v3/clusters", headers={"Authorization": basic("bob", "x")})
            right = await session.get(f"{base}/v3/clusters", headers={"Authorization": basic("bob", "bob-secret")})
            return anonymous.status, anonymous.headers.get("WWW-Authenticate"), wrong.status, right.status

    assert asyncio.run(scenario()) == (401, 'Basic realm="logway"', 401, 200)
