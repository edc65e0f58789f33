"""The table of served APIs: each handler module registers its key, versions and function.

A handler takes (RequestContext, request) and returns one of:
- a kio response entity, of any version of its API: it is adapted to the version the client
  used and encoded;
- `EncodedResponse`: a body already encoded for the client's version (the hot paths), with
  where its throttle_time_ms field sits in the first chunk, for quotas to set it;
- `NO_RESPONSE`: nothing is sent (Produce with acks=0);
- an awaitable giving one of the above, for a handler that must wait (long-poll Fetch).
Requests arrive as the kio class of the handler's newest version, whatever version the client
sent, unless the handler registers its own `parse` (bytes in, request object out).
"""

from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.headers import RequestHeader

from broker.session import Session

if TYPE_CHECKING:
    from broker.fetch_sessions import FetchSessionCache
    from broker.metrics.stats import BrokerTopicStats
    from broker.replica_manager import ReplicaManager
    from broker.security.authorizer import Authorizer
    from broker.security.quotas import ClientQuotas
    from broker.server import Broker
    from broker.topic_store import TopicStore


# The classes a request builds write their own __init__: compiled code calls it directly,
# where a NamedTuple's __new__ and a dataclass's generated __init__ are interpreted functions
# (tests/unit/test_compiled_modules.py).


class BrokerServices:
    """The parts of the broker that the hot paths' handlers use on every request, held here
    once: compiled code reads them natively, where each of the interpreted Broker's attributes
    is a generic lookup (broker.dispatch makes one, after the broker's metrics)."""

    __slots__ = ("replica_manager", "topic_store", "topic_stats", "client_quotas", "authorizer", "fetch_sessions")

    def __init__(self, broker: "Broker") -> None:
        self.replica_manager: ReplicaManager = broker.replica_manager
        self.topic_store: TopicStore = broker.topic_store  # TopicManager.topics is its `topics`
        self.topic_stats: BrokerTopicStats = broker.metrics.topics
        self.client_quotas: ClientQuotas = broker.client_quotas
        self.authorizer: Authorizer | None = broker.authorizer
        self.fetch_sessions: FetchSessionCache = broker.fetch_sessions


class RequestContext:
    # Not a dataclass: compiled, a dataclass evaluates its field types when the module loads,
    # and Broker is imported for type checking only.

    __slots__ = ("broker", "services", "header", "session")

    def __init__(self, broker: "Broker", services: BrokerServices, header: RequestHeader, session: Session) -> None:
        self.broker = broker
        self.services = services
        self.header = header
        self.session = session

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_address(self) -> str:
        return self.session.client_address

    @property
    def listener(self) -> str | None:
        """The advertised listener whose endpoints Metadata, DescribeCluster and FindCoordinator
        answer with; None: the broker's client listener."""
        return self.session.advertised_listener


@dataclass(slots=True, init=False)
class EncodedResponse:
    chunks: list[bytes | Sized]
    # Offset of the INT32 throttle_time_ms in chunks[0] (negative: from its end); None: the
    # version has no such field.
    throttle_offset: int | None

    def __init__(self, chunks: list[bytes | Sized], throttle_offset: int | None = None) -> None:
        self.chunks = chunks
        self.throttle_offset = throttle_offset


NO_RESPONSE: Final = object()

Handle = Callable[[RequestContext, Any], Any]
Parse = Callable[[int, memoryview], Any]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: ApiKey
    min_version: int
    max_version: int
    handle: Handle
    parse: Parse | None

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


HANDLERS: Final[dict[int, ApiHandler]] = {}


def api(api_key: ApiKey, versions: tuple[int, int], parse: Parse | None = None):
    """Register the decorated function as the handler of `api_key` for `versions` (inclusive)."""

    def register(handle: Handle) -> Handle:
        if api_key in HANDLERS:
            raise RuntimeError(f"{api_key.name} is registered twice")
        HANDLERS[api_key] = ApiHandler(api_key, versions[0], versions[1], handle, parse)
        return handle

    return register


def as_sent(api_key: ApiKey) -> Parse:
    """A parse that keeps the request as the class of the client's version, for the APIs whose
    shape changed between versions in ways copying fields by name cannot follow."""

    def parse(version: int, body: memoryview) -> Any:
        return schemas.decode(schemas.request_type(api_key, version), body)

    return parse
