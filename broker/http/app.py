"""The HTTP listener: aiohttp on the broker's event loop, serving the REST Proxy's API.

Why aiohttp and not broker/metrics/endpoint.py's server: that one answers two GET routes with
one request per connection and reads only the request line; the REST API needs request bodies,
keep-alive, chunked (streamed) requests and responses, and many routes, which is what aiohttp
is for. The metrics endpoint stays as it is (its own listener, no framework).

Every request: its body is bounded by http.max.request.bytes (413 beyond; a streamed v3
produce's each record, broker/http/v3.py), its user checked
when http.authentication.method=BASIC (401 otherwise, with WWW-Authenticate), and what it asks
of Kafka goes through the broker's own handlers (broker/http/loopback.py) with the user's
principal. https:// listeners use the broker's ssl.* settings (broker/security/tls.py).
"""

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from broker.http import v2, v3
from broker.http.basic_auth import BasicAuthenticator
from broker.http.consumers import ConsumerInstances
from broker.http.context import API, PRINCIPAL
from broker.http.errors import RestError
from broker.http.loopback import Loopback
from broker.http.produce import Producer
from broker.http.routing import Router
from broker.security import tls
from broker.session import ANONYMOUS

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher
    from broker.server import Broker

log = logging.getLogger(__name__)



class HttpApi:
    def __init__(self, broker: "Broker", dispatcher: "Dispatcher") -> None:
        config = broker.config
        self.broker = broker
        self.loopback = Loopback(dispatcher)
        self.router = Router(broker, self.loopback)
        self.producer = Producer(self.router)
        self.consumers = ConsumerInstances(
            self.router, config.get("http.consumer.instance.timeout.ms") / 1000,
            config.get("http.consumer.request.timeout.ms"),
        )
        self.max_request_bytes = config.get("http.max.request.bytes")
        self._auth = BasicAuthenticator(broker) if config.get("http.authentication.method") == "BASIC" else None
        self._runner: web.AppRunner | None = None
        self._sites: list[web.TCPSite] = []
        # TLS contexts are built at construction, as the Kafka listeners' are: a bad keystore
        # stops the start.
        self._ssl = (
            tls.server_context(config.ssl_settings("HTTPS"))
            if any(scheme == "https" for scheme, _, _ in config.http_listeners)
            else None
        )

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.max_request_bytes, middlewares=[self._middleware])
        app[API] = self
        v3.add_routes(app)
        v2.add_routes(app)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.application(), access_log=None, handle_signals=False)
        await self._runner.setup()
        for scheme, host, port in self.broker.config.http_listeners:
            site = web.TCPSite(self._runner, host or None, port, ssl_context=self._ssl if scheme == "https" else None)
            try:
                await site.start()
            except OSError as exc:
                raise OSError(exc.errno, f"http.listeners {scheme}://{host}:{port}: {exc.strerror or exc}") from exc
            self._sites.append(site)
        self.consumers.start()

    @property
    def ports(self) -> list[int]:
        return [site._server.sockets[0].getsockname()[1] for site in self._sites]  # noqa: SLF001

    async def stop(self) -> None:
        await self.consumers.stop()
        await self.producer.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        try:
            if request.content_length is not None and request.content_length > self.max_request_bytes:
                raise RestError(413, 413, f"Request body of {request.content_length} bytes is larger than "
                                f"http.max.request.bytes ({self.max_request_bytes})")
            principal = ANONYMOUS
            if self._auth is not None:
                principal = self._auth.principal(request.headers.get("Authorization"))
                if principal is None:
                    response = RestError(401, 401, "Unauthorized").response()
                    response.headers["WWW-Authenticate"] = 'Basic realm="logway"'
                    return response
            request[PRINCIPAL] = principal
            return await handler(request)
        except RestError as exc:
            return exc.response()
        except web.HTTPRequestEntityTooLarge:
            return RestError(413, 413, f"Request body is larger than http.max.request.bytes "
                             f"({self.max_request_bytes})").response()
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return RestError(exc.status, exc.status, exc.reason).response()
