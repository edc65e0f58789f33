"""SCRAM credentials of users: kept per user as Kafka keeps them, served from memory.

Each user has a config like Kafka's /config/users/<user> ZooKeeper node: {"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096", ...} (other keys, such as quotas, are
kept untouched). Where the configs live is a `UserConfigs` backend: ZooKeeper in cluster mode
(broker/security/zk_user_configs.py), a file in the log dirs standalone (`FileUserConfigs`).

`ScramCredentialStore` answers the SCRAM mechanism's lookups from memory (they happen on the
event loop), DescribeUserScramCredentials from memory, and carries out
AlterUserScramCredentials with Kafka's checks (ZkAdminManager.alterUserScramCredentials):
an empty name, an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), iterations outside
4096..16384 (UNACCEPTABLE_CREDENTIAL), a user and mechanism named twice (DUPLICATE_RESOURCE),
the deletion of a credential that does not exist (RESOURCE_NOT_FOUND); each fails its user
only. The client sends the salted password; only the salt, StoredKey and ServerKey are kept.
"""

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode
from storage.mirrored_document import MirroredDocument

from broker.security import scram
from broker.security.scram import ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

USERS_FILE = "logway-users.json"
USERNAME_MUST_NOT_BE_EMPTY = "Username must not be empty"


class UserConfigs(Protocol):
    async def read_all(self) -> dict[str, dict[str, str]]:
        """Every user's config."""

    async def write(self, user: str, credentials: dict[str, str]) -> dict[str, str]:
        """Make `credentials` the user's SCRAM keys, keeping its other keys (quotas), and tell the
        other brokers (cluster mode); the user's whole config after the write."""


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: int  # Kafka's type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True)
class UserResult:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True)
class DescribedUser:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()  # (mechanism type, iterations)


class ScramCredentialStore:
    def __init__(self, backend: UserConfigs) -> None:
        self._backend = backend
        self._configs: dict[str, dict[str, str]] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        self._configs = await self._backend.read_all()

    def update_user(self, user: str, config: dict[str, str] | None) -> None:
        """Another broker changed `user` (cluster mode: a /config/changes notification)."""
        if config is None:
            self._configs.pop(user, None)
        else:
            self._configs[user] = dict(config)

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        text = self._configs.get(user, {}).get(mechanism.name)
        if text is None:
            return None
        try:
            return ScramCredential.from_kafka_string(text)
        except ValueError as exc:
            log.warning("user %s has an unreadable %s credential: %s", user, mechanism.name, exc)
            return None

    # ------------------------------------------------------------------ Describe

    def describe(self, users: Sequence[str] | None) -> list[DescribedUser]:
        """All users with a SCRAM credential (sorted) when `users` is None or empty, else each
        user named, in order, once."""
        if not users:
            return [self._described(user) for user in sorted(self._configs) if self._has_scram(user)]
        counts: dict[str, int] = {}
        for user in users:
            counts[user] = counts.get(user, 0) + 1
        results = []
        for user in dict.fromkeys(users):
            if not user:
                results.append(DescribedUser(user, ErrorCode.resource_not_found, USERNAME_MUST_NOT_BE_EMPTY))
            elif counts[user] > 1:
                results.append(DescribedUser(
                    user, ErrorCode.duplicate_resource,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                ))
            elif not self._has_scram(user):
                results.append(DescribedUser(
                    user, ErrorCode.resource_not_found,
                    f"Attempt to describe a user credential that does not exist: {user}",
                ))
            else:
                results.append(self._described(user))
        return results

    def _has_scram(self, user: str) -> bool:
        return any(name in self._configs.get(user, {}) for name in scram.MECHANISMS)

    def _described(self, user: str) -> DescribedUser:
        infos = []
        for mechanism in (scram.SCRAM_SHA_256, scram.SCRAM_SHA_512):
            text = self._configs[user].get(mechanism.name)
            if text is not None:
                try:
                    infos.append((mechanism.kafka_type, ScramCredential.from_kafka_string(text).iterations))
                except ValueError as exc:
                    return DescribedUser(user, ErrorCode.unknown_server_error, str(exc))
        return DescribedUser(user, credentials=tuple(infos))

    # ------------------------------------------------------------------ Alter

    async def alter(self, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]) -> list[UserResult]:
        async with self._lock:
            return await self._alter(upsertions, deletions)

    async def _alter(self, upsertions: Sequence[Upsertion], deletions: Sequence[Deletion]) -> list[UserResult]:
        results: list[UserResult] = []
        illegal = _illegal_requests(upsertions, deletions)
        results.extend(UserResult(user, error, message) for user, (error, message) in illegal.items())
        pairs = [(u.user, u.mechanism) for u in upsertions if u.user not in illegal]
        pairs += [(d.user, d.mechanism) for d in deletions if d.user not in illegal]
        duplicated = {user for user, mechanism in pairs if pairs.count((user, mechanism)) > 1}
        results.extend(
            UserResult(
                user, ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
            )
            for user in dict.fromkeys(user for user, _ in pairs if user in duplicated)
        )
        candidates = list(dict.fromkeys(user for user, _ in pairs if user not in duplicated))
        configs = {user: _scram_only(self._configs.get(user, {})) for user in candidates}
        missing = {
            d.user for d in deletions
            if d.user in configs and scram.BY_KAFKA_TYPE[d.mechanism].name not in configs[d.user]
        }
        results.extend(
            UserResult(user, ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
            for user in candidates if user in missing
        )
        to_alter = [user for user in candidates if user not in missing]
        for deletion in deletions:
            if deletion.user in to_alter:
                configs[deletion.user].pop(scram.BY_KAFKA_TYPE[deletion.mechanism].name, None)
        for upsertion in upsertions:
            if upsertion.user in to_alter:
                mechanism = scram.BY_KAFKA_TYPE[upsertion.mechanism]
                credential = scram.credential_from_salted_password(
                    mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
                )
                configs[upsertion.user][mechanism.name] = credential.to_kafka_string()
        for user in to_alter:
            try:
                self._configs[user] = await self._backend.write(user, configs[user])
            except Exception as exc:  # noqa: BLE001 - the user's result carries it, as in Kafka
                log.warning("writing the SCRAM credentials of %s failed: %s", user, exc)
                results.append(UserResult(user, ErrorCode.unknown_server_error, str(exc)))
                continue
            results.append(UserResult(user))
        return results


def _scram_only(config: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in config.items() if key in scram.MECHANISMS}


def merge_scram(config: dict[str, str], credentials: dict[str, str]) -> dict[str, str]:
    """`config` with its SCRAM keys replaced by `credentials` (other keys kept)."""
    return {**{k: v for k, v in config.items() if k not in scram.MECHANISMS}, **credentials}


def _illegal_requests(
    upsertions: Iterable[Upsertion], deletions: Iterable[Deletion]
) -> dict[str, tuple[ErrorCode, str]]:
    illegal: dict[str, tuple[ErrorCode, str]] = {}
    for deletion in deletions:
        if not deletion.user:
            illegal[deletion.user] = (ErrorCode.unacceptable_credential, USERNAME_MUST_NOT_BE_EMPTY)
        elif deletion.mechanism not in scram.BY_KAFKA_TYPE:
            illegal[deletion.user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    for upsertion in upsertions:
        if not upsertion.user:
            illegal[upsertion.user] = (ErrorCode.unacceptable_credential, USERNAME_MUST_NOT_BE_EMPTY)
        elif upsertion.mechanism not in scram.BY_KAFKA_TYPE:
            illegal[upsertion.user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif upsertion.iterations > scram.MAX_ITERATIONS:
            illegal[upsertion.user] = (ErrorCode.unacceptable_credential, "Too many iterations")
        elif upsertion.iterations < scram.MIN_ITERATIONS:
            illegal[upsertion.user] = (ErrorCode.unacceptable_credential, "Too few iterations")
    return illegal


class FileUserConfigs:
    """Standalone: every user's config in logway-users.json in each log dir
    (storage/mirrored_document.py), as logway-metadata.json."""

    def __init__(self, log_dirs: Sequence[str]) -> None:
        self._file = MirroredDocument(log_dirs, USERS_FILE, "the SCRAM credentials")
        self._users: dict[str, dict[str, str]] = {}
        self._lock = asyncio.Lock()

    async def read_all(self) -> dict[str, dict[str, str]]:
        newest = await asyncio.to_thread(self._file.load)
        if newest is not None:
            self._users = {user: dict(config) for user, config in newest.get("users", {}).items()}
        return {user: dict(config) for user, config in self._users.items()}

    async def write(self, user: str, credentials: dict[str, str]) -> dict[str, str]:
        async with self._lock:  # one save at a time, in order
            users = {**self._users, user: dict(credentials)}
            await asyncio.to_thread(self._file.save, {"users": users})
            self._users = users
        return dict(credentials)
