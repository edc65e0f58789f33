"""Security: authorization (ACLs) today; TLS and SASL join it (issue 15)."""
