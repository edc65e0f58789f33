"""The HTTP API: the Confluent REST Proxy's v2 and v3 APIs on http.listeners (docs/http.md)."""
