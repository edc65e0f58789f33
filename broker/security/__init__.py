"""Security: TLS contexts and TLS principals (tls, ssl_principal_mapper)."""
