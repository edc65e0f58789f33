"""A small HTTP client of the REST Proxy API (urllib), for tests against broker processes."""

import json
import urllib.error
import urllib.request


class Http:
    def __init__(self, base: str, authorization: str | None = None, timeout_s: float = 20) -> None:
        self.base = base
        self.authorization = authorization
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body=None, content_type="application/json", accept=None):
        """(status, parsed JSON body or None)."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        if accept:
            request.add_header("Accept", accept)
        if self.authorization:
            request.add_header("Authorization", self.authorization)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                status, text = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read()
        return status, (json.loads(text) if text.strip() else None)
