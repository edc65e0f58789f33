"""Security: SASL mechanisms and the per-connection authentication state (issue 15).

Pure code with no I/O of its own: the network layer feeds request frames in, the handlers
of SaslHandshake and SaslAuthenticate drive `sasl_server.SaslAuthenticator`, and credential
stores persist through what the broker hands them.
"""
