"""What the dispatcher hands a connection for a request: its answer's chunks (bytes, and file
regions of fetched records), a ThrottledResponse, or CloseAfterResponse raised; or either to
come, as a Deferred (broker/deferred.py: a long-poll Fetch) or another awaitable.

Apart from broker.network because that module is compiled (setup.py) and a compiled class
cannot subclass list, as ThrottledResponse does so that it goes wherever chunks go.
"""

from collections.abc import Sized

from protocol.errors import ProtocolError

Chunks = list[bytes | Sized]


class CloseAfterResponse(ProtocolError):
    """Raised by dispatch: `response` is the connection's last answer; send it, then close
    (a failed SASL authentication: Kafka answers, then closes)."""

    def __init__(self, reason: str, response: "Chunks") -> None:
        super().__init__(reason)
        self.response = response


class ThrottledResponse(list):
    """A response (its chunks; possibly none, for a request without an answer) after which the
    connection reads and serves no request for `throttle_s` seconds: a client over its quota
    (KIP-219: the answer goes at once, the channel is muted)."""

    def __init__(self, chunks: "Chunks", throttle_s: float) -> None:
        super().__init__(chunks)
        self.throttle_s = throttle_s
