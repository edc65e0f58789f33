"""Security: TLS contexts and principals (tls, ssl_principal_mapper), SASL (sasl_server, the
mechanisms plain, scram and oauthbearer, sasl_config, sasl_clients, scram_store,
zk_user_configs), authorization (ACLs: acl, acl_store, authorizer), client quotas (quotas,
quota_store, throttling)."""
