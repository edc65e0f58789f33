"""Security (issue 15): TLS, SASL, ACLs and client quotas."""
