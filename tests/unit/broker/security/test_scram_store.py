"""SCRAM credentials: Kafka's checks of AlterUserScramCredentials, Describe's answers, what is
stored (never the password) and the standalone file."""

import asyncio
import json

from protocol.errors import ErrorCode

from broker.security import scram
from broker.security.scram_store import (
    Deletion,
    DescribedUser,
    FileUserConfigs,
    ScramCredentialStore,
    UserResult,
    Upsertion,
)

SALT = b"0123456789abcdef"


def upsert(user: str, password: str = "pw", mechanism=scram.SCRAM_SHA_256, iterations: int = 4096) -> Upsertion:
    salted = scram.salted_password(mechanism, password, SALT, iterations)
    return Upsertion(user, mechanism.kafka_type, iterations, SALT, salted)


def store(tmp_path) -> ScramCredentialStore:
    credentials = ScramCredentialStore(FileUserConfigs([str(tmp_path)]))
    asyncio.run(credentials.load())
    return credentials


def test_an_upserted_credential_authenticates_and_only_salted_keys_are_written(tmp_path):
    credentials = store(tmp_path)
    assert asyncio.run(credentials.alter([upsert("alice", "alice-secret")], [])) == [UserResult("alice")]
    stored = json.loads((tmp_path / "logway-users.json").read_text())["users"]["alice"]
    assert list(stored) == ["SCRAM-SHA-256"]
    assert stored["SCRAM-SHA-256"].startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert "alice-secret" not in (tmp_path / "logway-users.json").read_text()
    server = scram.ScramServer(scram.SCRAM_SHA_256, credentials.lookup)
    client = scram.ScramClient(scram.SCRAM_SHA_256, "alice", "alice-secret")
    client.verify_server_final(server.evaluate(client.final_message(server.evaluate(client.first_message()))))


def test_credentials_survive_a_restart(tmp_path):
    asyncio.run(store(tmp_path).alter([upsert("alice", mechanism=scram.SCRAM_SHA_512, iterations=8192)], []))
    assert store(tmp_path).describe(None) == [DescribedUser("alice", credentials=((2, 8192),))]


def test_describe_lists_every_user_sorted_or_the_named_ones_with_kafkas_errors(tmp_path):
    credentials = store(tmp_path)
    asyncio.run(credentials.alter([upsert("bob"), upsert("alice"), upsert("alice", mechanism=scram.SCRAM_SHA_512)], []))
    assert [d.user for d in credentials.describe(None)] == ["alice", "bob"]
    assert credentials.describe(None)[0].credentials == ((1, 4096), (2, 4096))
    assert credentials.describe(["bob", "", "carol", "bob"]) == [
        DescribedUser(
            "bob", ErrorCode.duplicate_resource,
            "Cannot describe SCRAM credentials for the same user twice in a single request: bob",
        ),
        DescribedUser("", ErrorCode.resource_not_found, "Username must not be empty"),
        DescribedUser("carol", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: carol"),
    ]


def test_alter_checks_each_user_as_kafka_does(tmp_path):
    credentials = store(tmp_path)
    asyncio.run(credentials.alter([upsert("dave")], []))
    results = asyncio.run(credentials.alter(
        [
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            Upsertion("odd", 9, 4096, SALT, b"x"),
            upsert(""),
            upsert("twice"),
            upsert("twice"),
            upsert("fine"),
        ],
        [Deletion("absent", 1), Deletion("dave", 2)],
    ))
    assert {r.user: (r.error, r.message) for r in results} == {
        "few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "odd": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "twice": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        "absent": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "dave": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "fine": (ErrorCode.none, None),
    }
    assert [d.user for d in credentials.describe(None)] == ["dave", "fine"]


def test_a_deleted_credential_no_longer_authenticates(tmp_path):
    credentials = store(tmp_path)
    asyncio.run(credentials.alter([upsert("alice")], []))
    assert asyncio.run(credentials.alter([], [Deletion("alice", 1)])) == [UserResult("alice")]
    assert credentials.lookup("alice", scram.SCRAM_SHA_256) is None
    assert credentials.describe(None) == []


def test_a_change_from_another_broker_is_served_at_once(tmp_path):
    credentials = store(tmp_path)
    credential = scram.credential_from_password(scram.SCRAM_SHA_256, "pw", 4096)
    credentials.update_user("erin", {"SCRAM-SHA-256": credential.to_kafka_string(), "producer_byte_rate": "1024"})
    assert credentials.lookup("erin", scram.SCRAM_SHA_256) == credential
    credentials.update_user("erin", None)
    assert credentials.lookup("erin", scram.SCRAM_SHA_256) is None
