"""Where the ACL authorizer keeps its ACLs: ZooKeeper in cluster mode, a file standalone.

ZooKeeper (`ZkAclStore`), Kafka's layout (ZkData's ZkAclStore and ZkAclChangeStore), so Kafka's
`kafka-acls --authorizer-properties zookeeper.connect=...` reads and writes the same ACLs:
- LITERAL patterns at /kafka-acl/<ResourceType>/<name>, PREFIXED ones at
  /kafka-acl-extended/prefixed/<ResourceType>/<name> (resource types in Kafka's stored form:
  Topic, Group, Cluster, TransactionalId, DelegationToken, User), each holding
  {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read",
  "host":"*"}]}; a resource left without ACLs loses its znode.
- A change writes the znode with its version (compare-and-set; a concurrent writer makes it
  re-read and retry, up to 10 times as Kafka), then a sequential notification naming the
  resource: /kafka-acl-changes/acl_changes_<seq> holding "<RESOURCE_TYPE>:<name>" for LITERAL
  patterns, /kafka-acl-extended-changes/acl_changes_<seq> holding
  {"version":1,"resourceType":"TOPIC","name":"orders","patternType":"PREFIXED"} for the others.
  Every broker watches both and re-reads the named resource, so an ACL made through one broker is
  enforced by all at once. Notifications older than 15 minutes are deleted as they are read
  (Kafka's ZkNodeChangeNotificationListener). After a session expiry everything is re-read.

File (`FileAclStore`): logway-acls.json in every log dir, replaced durably
(storage.durable_file) with a generation number; the newest readable one is loaded at start.
Only this broker writes it.
"""

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence

from replication.zk import BadVersionError, NodeExistsError, NoNodeError, SessionEvent, WatchEvent, ZkClient, ZkError
from storage.mirrored_document import MirroredDocument

from broker.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

Acls = frozenset[AccessControlEntry]
OnChange = Callable[[ResourcePattern, Acls], None]

ACL_VERSION = 1
LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
MAX_UPDATE_RETRIES = 10
_RETRY_BACKOFF_S = 0.1
STORED_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN))
ACL_FILE = "logway-acls.json"


# ------------------------------------------------------------------------------ JSON forms


def encode_acls(acls: Acls) -> bytes:
    """A resource znode's value (Kafka's AclEntry.toJsonCompatibleMap)."""
    return json.dumps({"version": ACL_VERSION, "acls": [_entry_json(e) for e in sorted(acls)]}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> Acls:
    """Kafka's AclEntry.fromBytes: empty data is no ACLs; the version must be 1."""
    if not data:
        return frozenset()
    document = json.loads(data.decode())
    if document.get("version") != ACL_VERSION:
        raise ValueError(f"unsupported ACL version {document.get('version')!r}")
    return frozenset(_entry_from_json(item) for item in document["acls"])


def _entry_json(entry: AccessControlEntry) -> dict:
    return {
        "principal": entry.principal,
        "permissionType": entry.permission_type.stored_name,
        "operation": entry.operation.stored_name,
        "host": entry.host,
    }


def _entry_from_json(item: dict) -> AccessControlEntry:
    return AccessControlEntry(
        item["principal"],
        item["host"],
        AclOperation.from_name(item["operation"]),
        AclPermissionType.from_name(item["permissionType"]),
    )


def store_root(pattern_type: PatternType) -> str:
    if pattern_type is PatternType.LITERAL:
        return LITERAL_ROOT
    return f"{EXTENDED_ROOT}/{pattern_type.name.lower()}"


def resource_path(resource: ResourcePattern) -> str:
    return f"{store_root(resource.pattern_type)}/{resource.resource_type.stored_name}/{resource.name}"


def changes_path(pattern_type: PatternType) -> str:
    return LITERAL_CHANGES if pattern_type is PatternType.LITERAL else EXTENDED_CHANGES


def encode_change(resource: ResourcePattern) -> bytes:
    if resource.pattern_type is PatternType.LITERAL:
        return f"{resource.resource_type.name}:{resource.name}".encode()
    return json.dumps(
        {
            "version": 1,
            "resourceType": resource.resource_type.name,
            "name": resource.name,
            "patternType": resource.pattern_type.name,
        },
        separators=(",", ":"),
    ).encode()


def decode_change(changes: str, data: bytes) -> ResourcePattern:
    text = data.decode()
    if changes == LITERAL_CHANGES:
        resource_type, colon, name = text.partition(":")
        if not colon:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text}")
        return ResourcePattern(_known(ResourceType.from_name(resource_type)), name, PatternType.LITERAL)
    event = json.loads(text)
    if event["version"] > 1:
        raise ValueError(f"Acl change event received for unsupported version: {event['version']}")
    pattern_type = PatternType.from_name(event["patternType"])
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"unknown pattern type {event['patternType']}")
    return ResourcePattern(_known(ResourceType.from_name(event["resourceType"])), event["name"], pattern_type)


def _known(resource_type: ResourceType) -> ResourceType:
    if resource_type not in STORED_TYPES:
        raise ValueError("unknown resource type")
    return resource_type


# ------------------------------------------------------------------------------ ZooKeeper


class ZkAclStore:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self._on_change: OnChange | None = None
        self._known: set[ResourcePattern] = set()
        self._last_seen = {LITERAL_CHANGES: "", EXTENDED_CHANGES: ""}
        self._watches: dict[str, Callable[[WatchEvent], None]] = {}
        self._lock = asyncio.Lock()  # one reader of notifications at a time
        self._session_expired = False
        self._closed = False
        self.change_expiration_ms = CHANGE_EXPIRATION_MS

    async def load(self) -> dict[ResourcePattern, Acls]:
        """Create Kafka's ACL paths, arm the change watches, then read every ACL (watches
        first, so no change falls between the read and the watch); all over again in the new
        session when the session expires midway (the watches went with it)."""
        found = await self._zk.in_one_session(self._load)
        self._zk.add_session_listener(self._on_session_event)
        return found

    async def _load(self) -> dict[ResourcePattern, Acls]:
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for resource_type in STORED_TYPES:
                await self._zk.ensure_path(f"{store_root(pattern_type)}/{resource_type.stored_name}")
            await self._zk.ensure_path(changes_path(pattern_type))
        async with self._lock:
            for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
                names = sorted(await self._zk.get_children(changes, self._watch(changes)))
                self._last_seen[changes] = names[-1] if names else ""
            return await self._read_all()

    async def _read_all(self) -> dict[ResourcePattern, Acls]:
        found: dict[ResourcePattern, Acls] = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = store_root(pattern_type)
            for type_name in await self._zk.children_or_empty(root):
                resource_type = ResourceType.from_name(type_name)
                if resource_type not in STORED_TYPES:
                    log.warning("Ignoring unknown ResourceType: %s", type_name)
                    continue
                for name in await self._zk.children_or_empty(f"{root}/{type_name}"):
                    resource = ResourcePattern(resource_type, name, pattern_type)
                    acls = await self._read(resource)
                    if acls:
                        found[resource] = acls
        self._known = set(found)
        return found

    async def _read(self, resource: ResourcePattern) -> Acls:
        found = await self._zk.get_or_none(resource_path(resource))
        if found is None:
            return frozenset()
        try:
            return decode_acls(found[0])
        except (ValueError, KeyError) as exc:
            log.error("ignoring the ACLs of %s: %s", resource, exc)
            return frozenset()

    def watch(self, on_change: OnChange) -> None:
        self._on_change = on_change

    async def update(self, resource: ResourcePattern, change: Callable[[Acls], Acls]) -> Acls:
        path = resource_path(resource)
        for _attempt in range(MAX_UPDATE_RETRIES + 1):
            found = await self._zk.get_or_none(path)
            current = decode_acls(found[0]) if found else frozenset()
            new = change(current)
            if new == current:
                return current
            try:
                if not new:
                    await self._zk.delete(path, found[1].version)
                elif found is None:
                    await self._zk.create(path, encode_acls(new), makepath=True)
                else:
                    await self._zk.set(path, encode_acls(new), found[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                await asyncio.sleep(_RETRY_BACKOFF_S)
                continue
            log.info("Updated ACLs for %s", resource)
            await self._zk.create(f"{changes_path(resource.pattern_type)}/{CHANGE_PREFIX}", encode_change(resource), sequence=True)
            self._known.add(resource)
            return new
        raise ZkError(f"Failed to update ACLs for {resource} after trying a maximum of {MAX_UPDATE_RETRIES} times")

    async def close(self) -> None:
        self._closed = True

    # ------------------------------------------------------------------ notifications

    def _watch(self, changes: str) -> Callable[[WatchEvent], None]:
        watch = self._watches.get(changes)
        if watch is None:

            def watch(event: WatchEvent) -> None:
                if not self._closed:
                    asyncio.get_running_loop().create_task(self._guarded(self._follow(changes)))

            self._watches[changes] = watch
        return watch

    async def _guarded(self, work) -> None:
        try:
            await work
        except ZkError as exc:
            log.warning("reading ACL changes failed (%s); retried on the next session event", exc)

    async def _follow(self, changes: str) -> None:
        async with self._lock:
            names = sorted(await self._zk.get_children(changes, self._watch(changes)))
            fresh = [n for n in names if n > self._last_seen[changes]]
            if names:
                self._last_seen[changes] = names[-1]
            for name in fresh:
                found = await self._zk.get_or_none(f"{changes}/{name}")
                if found is None:
                    continue
                try:
                    resource = decode_change(changes, found[0])
                except (ValueError, KeyError) as exc:
                    log.error("ignoring ACL change notification %s/%s: %s", changes, name, exc)
                    continue
                acls = await self._read(resource)
                log.info("Processing Acl change notification for %s", resource)
                self._deliver(resource, acls)
            await self._purge_obsolete(changes, names)

    def _deliver(self, resource: ResourcePattern, acls: Acls) -> None:
        if acls:
            self._known.add(resource)
        else:
            self._known.discard(resource)
        if self._on_change is not None:
            self._on_change(resource, acls)

    async def _purge_obsolete(self, changes: str, names: Sequence[str]) -> None:
        oldest_kept_ms = time.time() * 1000 - self.change_expiration_ms
        for name in names:
            path = f"{changes}/{name}"
            stat = await self._zk.exists(path)
            if stat is not None and stat.ctime_ms < oldest_kept_ms:
                try:
                    await self._zk.delete(path)
                except NoNodeError:
                    pass  # another broker purged it first

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._closed:
            return
        if event is SessionEvent.EXPIRED:
            self._session_expired = True
        elif event is SessionEvent.CONNECTED and self._session_expired:
            self._session_expired = False
            asyncio.get_running_loop().create_task(self._guarded(self._reload()))

    async def _reload(self) -> None:
        """After a new session: the watches are gone and changes may have been missed."""
        async with self._lock:
            before = set(self._known)
            for changes in (LITERAL_CHANGES, EXTENDED_CHANGES):
                names = sorted(await self._zk.get_children(changes, self._watch(changes)))
                self._last_seen[changes] = names[-1] if names else ""
            found = await self._read_all()
            for resource in before - set(found):
                self._deliver(resource, frozenset())
            for resource, acls in found.items():
                self._deliver(resource, acls)


# ------------------------------------------------------------------------------ file


class FileAclStore:
    """Standalone: the ACLs in a file in every log dir (storage/mirrored_document.py)."""

    def __init__(self, log_dirs: Sequence[str]) -> None:
        self._file = MirroredDocument(log_dirs, ACL_FILE, "the ACLs")
        self._acls: dict[ResourcePattern, Acls] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> dict[ResourcePattern, Acls]:
        newest = await asyncio.to_thread(self._file.load)
        if newest is not None:
            self._acls = {
                ResourcePattern(ResourceType.from_name(r["resourceType"]), r["name"], PatternType.from_name(r["patternType"])):
                    frozenset(_entry_from_json(item) for item in r["acls"])
                for r in newest["resources"]
            }
        return dict(self._acls)

    def watch(self, on_change: OnChange) -> None:
        """Nothing else writes the file."""

    async def update(self, resource: ResourcePattern, change: Callable[[Acls], Acls]) -> Acls:
        async with self._lock:  # one save at a time, in order
            current = self._acls.get(resource, frozenset())
            new = change(current)
            if new == current:
                return current
            acls = dict(self._acls)
            if new:
                acls[resource] = new
            else:
                acls.pop(resource, None)
            await asyncio.to_thread(self._file.save, _file_document(acls))
            self._acls = acls
            return new

    async def close(self) -> None:
        pass


def _file_document(acls: dict[ResourcePattern, Acls]) -> dict:
    return {
        "resources": [
            {
                "resourceType": resource.resource_type.stored_name,
                "patternType": resource.pattern_type.name,
                "name": resource.name,
                "acls": [_entry_json(e) for e in sorted(entries)],
            }
            for resource, entries in sorted(acls.items())
        ],
    }
