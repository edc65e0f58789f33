"""ZooKeeper for the event loop: the only module that touches kazoo.

kazoo runs its own connection thread. Every call here returns an awaitable: kazoo's `*_async`
operations complete on that thread and their results are handed to the loop with
`call_soon_threadsafe`; the few kazoo calls without an async form (recursive delete,
ensure_path) run in a worker thread. Watches and session changes reach the loop the same way, so
callers only ever see them on the loop. Watches fire for znode changes, and once more
(RECONNECTED) when the connection comes back within the session: kazoo drops every watch with a
lost connection and, unlike ZooKeeper's Java client, does not set them again on the new one, so
the znode may have changed unseen and the owner re-reads it (and re-arms the watch). A session's
end is a session event, and the session's watches are gone with it.

Session states come out as `SessionEvent`s: CONNECTED (first connection, or reconnected within
the session), SUSPENDED (connection lost, the session may survive), EXPIRED (the session is gone
with its ephemeral znodes and watches; kazoo opens a new one and CONNECTED follows, after which
the owner must re-register its ephemeral znodes and re-arm its watches).

Errors are this module's own (`NoNodeError`, `NodeExistsError`, `BadVersionError`,
`NotEmptyError`, `SessionExpiredError`, and `ZkError` for the rest), so no caller imports kazoo.
An operation cut by a connection loss is retried once the client has reconnected (in the same
session or a new one), as Kafka's ZooKeeper client does; a session expiry fails it. Work that
sets ephemeral znodes or watches runs through `in_one_session`, which starts it over in the new
session when the old one expires midway.

Thread-safety: call from the event loop only; callbacks run on it.
"""

import asyncio
import enum
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from kazoo import exceptions as kazoo_errors
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import EventType, KeeperState
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)

T = TypeVar("T")


class ZkError(Exception):
    """A ZooKeeper operation failed (connection loss, session expiry, server error)."""


class NoNodeError(ZkError):
    pass


class NodeExistsError(ZkError):
    pass


class BadVersionError(ZkError):
    """A compare-and-set lost: the znode changed since its version was read."""


class NotEmptyError(ZkError):
    pass


class ConnectionLossError(ZkError):
    """The connection went before the answer came; operations retry this themselves."""


class SessionExpiredError(ZkError):
    """The session ended (its ephemeral znodes and watches with it) before the answer came."""


_ERRORS: dict[type, type[ZkError]] = {
    kazoo_errors.NoNodeError: NoNodeError,
    kazoo_errors.NodeExistsError: NodeExistsError,
    kazoo_errors.BadVersionError: BadVersionError,
    kazoo_errors.NotEmptyError: NotEmptyError,
    kazoo_errors.ConnectionLoss: ConnectionLossError,
    kazoo_errors.SessionExpiredError: SessionExpiredError,
}
_RETRY_BACKOFF_S = 0.1
_RECONNECT_MAX_DELAY_S = 1.0


def _translate(exc: BaseException) -> BaseException:
    if isinstance(exc, ZkError):
        return exc
    for kazoo_type, ours in _ERRORS.items():
        if isinstance(exc, kazoo_type):
            return ours(str(exc) or kazoo_type.__name__)
    if isinstance(exc, (kazoo_errors.KazooException, kazoo_errors.ZookeeperError)):
        return ZkError(f"{type(exc).__name__}: {exc}")
    return exc


class SessionEvent(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    EXPIRED = "expired"


class WatchKind(enum.Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILDREN = "children"
    RECONNECTED = "reconnected"  # the watch went with a lost connection: re-read the znode


class WatchEvent(NamedTuple):
    kind: WatchKind
    path: str


_WATCH_KINDS = {
    EventType.CREATED: WatchKind.CREATED,
    EventType.DELETED: WatchKind.DELETED,
    EventType.CHANGED: WatchKind.CHANGED,
    EventType.CHILD: WatchKind.CHILDREN,
}


@dataclass(frozen=True)
class ZnodeStat:
    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    ctime_ms: int = 0  # creation time, by the server's clock


Watch = Callable[[WatchEvent], None]


class Op(NamedTuple):
    """One step of a multi-op transaction: kind is "create", "set", "delete" or "check"."""

    kind: str
    path: str
    data: bytes = b""
    version: int = -1


def split_connect_string(connect: str) -> tuple[str, str]:
    """"h1:2181,h2:2181/chroot" -> ("h1:2181,h2:2181", "/chroot"); no chroot gives ""."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class ZkClient:
    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self._hosts, self._chroot = split_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._kazoo = KazooClient(
            hosts=self._hosts,
            timeout=session_timeout_ms / 1000,
            # As ZooKeeper's own client (Kafka's), a lost connection is tried again at most a
            # second apart however long ZooKeeper was away; kazoo's default doubles the pause up
            # to an hour, so a broker came back minutes after a long outage had ended.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=_RECONNECT_MAX_DELAY_S),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._connected = asyncio.Event()
        # kazoo's side of each armed watch; an entry lives while kazoo holds its wrapper (armed,
        # or firing), so watches of deleted znodes and one-off watch functions do not pile up.
        self._wrapped: weakref.WeakValueDictionary[Watch, Callable] = weakref.WeakValueDictionary()
        self._lost_watches: list[tuple[Watch, str]] = []  # dropped with the connection, in the session
        self._closed = False
        self._sessions_ended = 0
        # Told the seconds each request took, retries after a connection loss included (the
        # broker's ZooKeeperRequestLatencyMs); on the loop.
        self.on_request_latency: Callable[[float], None] = lambda seconds: None

    # ------------------------------------------------------------------ connection

    async def start(self) -> None:
        """Connect (creating the chroot path if missing, as Kafka does), or raise ZkError after
        zookeeper.connection.timeout.ms."""
        self._loop = asyncio.get_running_loop()
        self._kazoo.add_listener(self._on_kazoo_state)
        timeout_s = self.connection_timeout_ms / 1000
        try:
            await asyncio.to_thread(self._kazoo.start, timeout_s)
        except Exception as exc:
            raise ZkError(f"cannot connect to ZooKeeper at {self._hosts} within {timeout_s}s: {exc}") from exc
        self._connected.set()
        if self._chroot:
            await self._in_thread(self._kazoo.ensure_path, self._chroot)
            self._kazoo.chroot = self._chroot

    async def close(self) -> None:
        """End the session: its ephemeral znodes go at once."""
        self._closed = True
        await asyncio.to_thread(self._close_blocking)
        self._connected.set()  # operations waiting to retry fail now

    def _close_blocking(self) -> None:
        try:
            self._kazoo.stop()
        finally:
            self._kazoo.close()

    def add_session_listener(self, listener: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(listener)

    @property
    def session_id(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current session: tests use it to expire the session."""
        return self._kazoo.client_id

    @property
    def connected(self) -> bool:
        return self._kazoo.connected

    def _on_kazoo_state(self, state: str) -> None:
        """On kazoo's thread: never block here; hand the event to the loop."""
        event = {
            KazooState.CONNECTED: SessionEvent.CONNECTED,
            KazooState.SUSPENDED: SessionEvent.SUSPENDED,
            KazooState.LOST: SessionEvent.EXPIRED,
        }[state]
        if self._closed or self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._dispatch_session_event, event)

    def _dispatch_session_event(self, event: SessionEvent) -> None:
        log.info("ZooKeeper session %s", event.value)
        if event is SessionEvent.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if event is SessionEvent.EXPIRED:
            self._sessions_ended += 1
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("ZooKeeper session listener failed on %s", event.value)
        if event is SessionEvent.EXPIRED:
            self._lost_watches.clear()  # the owners set their watches again in the new session
        elif event is SessionEvent.CONNECTED:
            lost, self._lost_watches = self._lost_watches, []
            for watch, path in lost:
                _call_watch(watch, WatchEvent(WatchKind.RECONNECTED, path))

    async def in_one_session(self, steps: Callable[[], Awaitable[T]]) -> T:
        """Run `steps` until one run of them falls wholly within one session; returns what that
        run returned. A session that expires midway fails the run's operations from then on
        (SessionExpiredError), or, when the new session came quickly, lets them go on in it; either
        way the ephemeral znodes and watches the run set before went with the old session, so
        the steps run again from the start once the new session is connected. The steps must
        therefore be safe to repeat. Any other error ends the run and is raised."""
        while True:
            ended = self._sessions_ended
            try:
                result = await steps()
            except SessionExpiredError:
                pass
            else:
                if ended == self._sessions_ended:
                    return result
            log.warning("the ZooKeeper session expired midway: starting over in the new session")
            # The expiry may not have reached the loop yet (kazoo fails the operations first).
            await asyncio.sleep(_RETRY_BACKOFF_S)
            await self._connected.wait()
            if self._closed:
                raise ZkError("the ZooKeeper client is closed")

    def _on_watch_lost(self, watch: Watch, path: str) -> None:
        if self._closed:
            return
        if self._connected.is_set():  # the reconnection was quicker than kazoo's callback thread
            _call_watch(watch, WatchEvent(WatchKind.RECONNECTED, path))
        else:
            self._lost_watches.append((watch, path))

    # ------------------------------------------------------------------ operations

    async def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._call(lambda: self._kazoo.get_async(path, self._wrap(watch, path)))
        return data, _stat(stat)

    async def get_or_none(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            return None

    async def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        stat = await self._call(lambda: self._kazoo.exists_async(path, self._wrap(watch, path)))
        return None if stat is None else _stat(stat)

    async def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return list(await self._call(lambda: self._kazoo.get_children_async(path, self._wrap(watch, path))))

    async def children_or_empty(self, path: str, watch: Watch | None = None) -> list[str]:
        try:
            return await self.get_children(path, watch)
        except NoNodeError:
            return []

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create a znode; returns its path (with the sequence number, for sequential ones)."""
        return await self._call(
            lambda: self._kazoo.create_async(path, data, ephemeral=ephemeral, sequence=sequence, makepath=makepath)
        )

    async def create_with_stat(self, path: str, data: bytes, *, ephemeral: bool = False) -> ZnodeStat:
        _, stat = await self._call(
            lambda: self._kazoo.create_async(path, data, ephemeral=ephemeral, makepath=True, include_data=True)
        )
        return _stat(stat)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Write `data`; with `version` >= 0 only if the znode is still at it (compare-and-set)."""
        return _stat(await self._call(lambda: self._kazoo.set_async(path, data, version)))

    async def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        if recursive:
            await self._in_thread(self._kazoo.delete, path, recursive=True)
        else:
            await self._call(lambda: self._kazoo.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        await self._in_thread(self._kazoo.ensure_path, path)

    async def multi(self, ops: Sequence[Op]) -> None:
        """Apply `ops` atomically: all or none. A failed step raises its error."""
        results = await self._call(lambda: self._transaction(ops).commit_async())
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, kazoo_errors.RolledBackError):
                raise _translate(result)

    def _transaction(self, ops: Sequence[Op]) -> Any:
        transaction = self._kazoo.transaction()
        for op in ops:
            if op.kind == "create":
                transaction.create(op.path, op.data)
            elif op.kind == "set":
                transaction.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                transaction.delete(op.path, op.version)
            elif op.kind == "check":
                transaction.check(op.path, op.version)
            else:
                raise ValueError(f"unknown transaction step {op.kind}")
        return transaction

    # ------------------------------------------------------------------ bridging

    async def _call(self, start: Callable[[], Any]) -> Any:
        """Run a kazoo async operation; after a connection loss, again once reconnected (as
        Kafka's ZooKeeper client does), unless the client is closing."""
        started = time.monotonic()
        try:
            while True:
                try:
                    return await self._bridge(start())
                except ConnectionLossError:
                    await self._until_reconnected()
        finally:
            self.on_request_latency(time.monotonic() - started)

    async def _until_reconnected(self) -> None:
        if self._closed:
            raise ConnectionLossError("the ZooKeeper client is closed")
        # The loss may not have reached the session listeners yet: give them a moment.
        await asyncio.sleep(_RETRY_BACKOFF_S)
        await self._connected.wait()

    def _bridge(self, async_result: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(result: Any) -> None:
            # On kazoo's thread: the result is ready, get() does not block.
            try:
                value = result.get(block=False)
            except BaseException as exc:  # noqa: BLE001 (handed to the loop as it is)
                error = _translate(exc)
                loop.call_soon_threadsafe(_set_exception, future, error)
            else:
                loop.call_soon_threadsafe(_set_result, future, value)

        async_result.rawlink(settle)
        return future

    async def _in_thread(self, function: Callable, *args: Any, **kwargs: Any) -> Any:
        while True:
            try:
                return await asyncio.to_thread(function, *args, **kwargs)
            except BaseException as exc:
                error = _translate(exc)
                if not isinstance(error, ConnectionLossError):
                    raise error from exc
            await self._until_reconnected()

    def _wrap(self, watch: Watch | None, path: str) -> Callable | None:
        """kazoo's side of `watch`: one per watch function while armed, so that arming the same
        watch on a znode again does not add a watcher (kazoo keeps a set per path). A watch
        function watches one znode, `path`. Once kazoo lets go of the wrapper (the watch fired,
        or went with the connection: RECONNECTED then goes to `watch` itself), the entry goes."""
        if watch is None:
            return None
        wrapped = self._wrapped.get(watch)
        if wrapped is None:
            wrapped = self._wrapped[watch] = self._wrap_new(watch, path)
        return wrapped

    def _wrap_new(self, watch: Watch, path: str) -> Callable:
        loop = self._loop or asyncio.get_running_loop()

        def on_kazoo_thread(event: Any) -> None:
            if loop.is_closed():
                return
            kind = _WATCH_KINDS.get(event.type)
            if kind is not None:
                loop.call_soon_threadsafe(_call_watch, watch, WatchEvent(kind, event.path))
            elif event.state == KeeperState.CONNECTING:  # type NONE: the connection went
                loop.call_soon_threadsafe(self._on_watch_lost, watch, path)
            # Type NONE in another state: the session ended; the session listeners hear of it
            # and the owners set their watches again in the new session.

        return on_kazoo_thread


def _call_watch(watch: Watch, event: WatchEvent) -> None:
    try:
        watch(event)
    except Exception:
        log.exception("ZooKeeper watch failed on %s", event)


def _set_result(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _stat(stat: Any) -> ZnodeStat:
    return ZnodeStat(
        version=stat.version, czxid=stat.czxid, mzxid=stat.mzxid, ephemeral_owner=stat.ephemeralOwner,
        ctime_ms=stat.ctime,
    )
