"""Security: TLS contexts and principals (tls, ssl_principal_mapper), authorization (ACLs:
acl, acl_store, authorizer), client quotas (quotas, quota_store, throttling)."""
