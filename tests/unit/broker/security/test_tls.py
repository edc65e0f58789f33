"""broker.security.tls: contexts from Kafka's ssl.* settings (PEM file, inline PEM, PKCS12,
encrypted keys), Kafka's refusals, and the principal of a TLS client."""

import datetime
import re
import ssl

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from broker.config import BrokerConfig, ConfigError
from broker.security import tls
from broker.security.ssl_principal_mapper import SslPrincipalMapper
from broker.session import ANONYMOUS, KafkaPrincipal, Session

DEFAULTS = BrokerConfig().ssl_settings("PLAINTEXT")


def settings(**values) -> dict:
    """Kafka's defaults with `values` (keys with dots written with underscores)."""
    return {**DEFAULTS, **{key.replace("_", "."): value for key, value in values.items()}}


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


@pytest.fixture(scope="module")
def server_cert(ca):
    return ca.issue_cert("localhost", "127.0.0.1")


def pem_files(tmp_path, ca, server_cert):
    keystore = tmp_path / "server.pem"
    server_cert.private_key_and_cert_chain_pem.write_to_path(str(keystore))
    truststore = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(truststore))
    return str(keystore), str(truststore)


def key_and_chain(cert):
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    chain = [x509.load_pem_x509_certificate(blob.bytes()) for blob in cert.cert_chain_pems]
    return key, chain


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str = "localhost"):
    """Run a handshake between two contexts in memory; the server's SSLObject once done."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(s_in, s_out, server_side=True)
    client_side = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, side in (("client", client_side), ("server", server_side)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server learns the client's certificate verdict from its last flight.
            try:
                server_side.read(1)
            except ssl.SSLWantReadError:
                pass
            return server_side
    raise AssertionError("handshake did not finish")


def client_trusting(ca, cert=None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if cert is not None:
        cert.configure_cert(context)
    return context


# ------------------------------------------------------------------------------ keystores


def test_pem_keystore_file_serves_a_client_that_trusts_its_ca(tmp_path, ca, server_cert):
    keystore, _ = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=keystore))
    handshake(context, client_trusting(ca))


def test_inline_pem_key_and_chain(ca, server_cert):
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM",
            ssl_keystore_key=server_cert.private_key_pem.bytes().decode(),
            ssl_keystore_certificate_chain="".join(b.bytes().decode() for b in server_cert.cert_chain_pems),
        )
    )
    handshake(context, client_trusting(ca))


def test_inline_pem_on_one_line_as_a_properties_value_may_hold_it(ca, server_cert):
    one_line = " ".join(server_cert.private_key_pem.bytes().decode().split("\n"))
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM",
            ssl_keystore_key=one_line,
            ssl_keystore_certificate_chain=server_cert.cert_chain_pems[0].bytes().decode(),
        )
    )
    handshake(context, client_trusting(ca))


def test_encrypted_pem_key_needs_ssl_key_password(tmp_path, ca, server_cert):
    key, chain = key_and_chain(server_cert)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-secret"),
    ).decode()
    chain_pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in chain)
    values = {"ssl_keystore_type": "PEM", "ssl_keystore_key": encrypted, "ssl_keystore_certificate_chain": chain_pem}
    context = tls.server_context(settings(**values, ssl_key_password="key-secret"))
    handshake(context, client_trusting(ca))
    with pytest.raises(ConfigError, match="encrypted and ssl.key.password is not set"):
        tls.server_context(settings(**values))
    with pytest.raises(ConfigError, match="Private key could not be loaded"):
        tls.server_context(settings(**values, ssl_key_password="wrong"))


def test_encrypted_pem_keystore_file(tmp_path, ca, server_cert):
    key, chain = key_and_chain(server_cert)
    path = tmp_path / "encrypted.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-secret"),
        )
        + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    )
    context = tls.server_context(
        settings(ssl_keystore_type="PEM", ssl_keystore_location=str(path), ssl_key_password="key-secret")
    )
    handshake(context, client_trusting(ca))


def write_pkcs12(path, cert, password: bytes):
    key, chain = key_and_chain(cert)
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server", key, chain[0], chain[1:], serialization.BestAvailableEncryption(password)
        )
    )
    return str(path)


def test_pkcs12_keystore(tmp_path, ca, server_cert):
    location = write_pkcs12(tmp_path / "server.p12", server_cert, b"store-secret")
    context = tls.server_context(
        settings(ssl_keystore_type="PKCS12", ssl_keystore_location=location, ssl_keystore_password="store-secret")
    )
    handshake(context, client_trusting(ca))


def test_wrong_pkcs12_password_is_refused_as_kafka_words_it(tmp_path, server_cert):
    location = write_pkcs12(tmp_path / "server.p12", server_cert, b"store-secret")
    with pytest.raises(
        ConfigError,
        match=f"Failed to load SSL keystore {location} of type PKCS12: keystore password was incorrect",
    ):
        tls.server_context(
            settings(ssl_keystore_type="PKCS12", ssl_keystore_location=location, ssl_keystore_password="nope")
        )


def test_missing_keystore_file_is_refused(tmp_path):
    location = str(tmp_path / "absent.p12")
    with pytest.raises(ConfigError, match=f"Failed to load SSL keystore {location} of type PKCS12"):
        tls.server_context(
            settings(ssl_keystore_type="PKCS12", ssl_keystore_location=location, ssl_keystore_password="x")
        )


def test_jks_is_refused_with_how_to_convert(tmp_path):
    with pytest.raises(ConfigError, match="ssl.keystore.type: logway cannot read Java key stores.*PKCS12"):
        tls.check_settings(settings(ssl_keystore_location="/x.jks", ssl_keystore_password="x"))
    with pytest.raises(ConfigError, match="ssl.truststore.type: logway cannot read Java key stores"):
        tls.check_settings(settings(ssl_truststore_location="/t.jks"))


@pytest.mark.parametrize(
    "values, message",
    [
        ({"ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c"},
         "SSL private key can be specified only for PEM, but key store type is JKS."),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k"},
         "SSL private key is specified, but certificate chain is not specified."),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c",
          "ssl.keystore.location": "/x"},
         "Both SSL key store location and separate private key are specified."),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "k", "ssl.keystore.certificate.chain": "c",
          "ssl.keystore.password": "p"},
         "SSL key store password cannot be specified with PEM format"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "c"},
         "SSL certificate chain is specified, but private key is not specified"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.password": "p"},
         "SSL key store is not specified, but key store password is specified."),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/x"},
         "SSL key store is specified, but key store password is not specified."),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/x", "ssl.keystore.password": "p",
          "ssl.key.password": "q"},
         "ssl.key.password differs from ssl.keystore.password"),
        ({"ssl.truststore.certificates": "c"},
         "SSL trust store certs can be specified only for PEM, but trust store type is JKS."),
        ({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "c", "ssl.truststore.location": "/x"},
         "Both SSL trust store location and separate trust certificates are specified."),
        ({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/x", "ssl.truststore.password": "p"},
         "SSL trust store password cannot be specified for PEM format."),
        ({"ssl.truststore.password": "p"},
         "SSL trust store is not specified, but trust store password is specified."),
        ({"ssl.provider": "SunJSSE"}, "ssl.provider: logway's TLS is Python's ssl module"),
        ({"ssl.keymanager.algorithm": "PKIX"}, "leave ssl.keymanager.algorithm at its default SunX509"),
        ({"ssl.engine.factory.class": "x.Y"}, "ssl.engine.factory.class"),
        ({"ssl.enabled.protocols": ["TLSv1.1", "TLSv1.3"]}, "list consecutive versions"),
        ({"ssl.enabled.protocols": ["SSLv3"]}, "expected versions among"),
        ({"ssl.protocol": "SSL"}, "Invalid value SSL for configuration ssl.protocol"),
        ({"ssl.endpoint.identification.algorithm": "ldaps"}, "expected https, or an empty value"),
        ({"ssl.cipher.suites": ["TLS_AES_128_GCM_SHA256"]}, "cannot restrict TLS 1.3 cipher suites"),
        ({"ssl.cipher.suites": ["TLS_NOT_A_SUITE_WITH_NOTHING"]}, "unknown or unavailable cipher suites"),
    ],
)
def test_kafkas_refusals(values, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tls.check_settings({**DEFAULTS, **values})


def test_a_listener_without_keystore_cannot_serve():
    with pytest.raises(ConfigError, match="SSL key store is not specified"):
        tls.server_context(settings())


# ------------------------------------------------------------------------------ protocol, suites


def test_enabled_protocols_bound_the_versions(tmp_path, ca, server_cert):
    keystore, _ = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(
        settings(ssl_keystore_type="PEM", ssl_keystore_location=keystore, ssl_enabled_protocols=["TLSv1.2"])
    )
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2
    assert handshake(context, client_trusting(ca)).version() == "TLSv1.2"


def test_iana_cipher_suites_without_tls13_ones_leave_tls13_off_as_in_java(tmp_path, ca, server_cert):
    keystore, _ = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM",
            ssl_keystore_location=keystore,
            ssl_cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
        )
    )
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2
    session = handshake(context, client_trusting(ca))
    assert session.cipher()[0] in ("ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384")


# ------------------------------------------------------------------------------ trust, clients


def test_required_client_auth_refuses_a_client_without_certificate(tmp_path, ca, server_cert):
    keystore, truststore = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM", ssl_keystore_location=keystore, ssl_truststore_type="PEM",
            ssl_truststore_location=truststore, ssl_client_auth="required",
        )
    )
    with pytest.raises(ssl.SSLError):
        handshake(context, client_trusting(ca))


def test_pkcs12_truststore_and_inline_truststore_certificates(tmp_path, ca, server_cert):
    keystore, _ = pem_files(tmp_path, ca, server_cert)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    trust_p12 = tmp_path / "trust.p12"
    trust_p12.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca_cert, b"ca")], serialization.BestAvailableEncryption(b"trust")
        )
    )
    client_cert = ca.issue_cert("client@example.com")
    for trust in (
        {"ssl_truststore_type": "PKCS12", "ssl_truststore_location": str(trust_p12), "ssl_truststore_password": "trust"},
        {"ssl_truststore_type": "PEM", "ssl_truststore_certificates": ca.cert_pem.bytes().decode()},
    ):
        context = tls.server_context(
            settings(ssl_keystore_type="PEM", ssl_keystore_location=keystore, ssl_client_auth="required", **trust)
        )
        assert handshake(context, client_trusting(ca, client_cert)).getpeercert(binary_form=True)


def test_inter_broker_client_checks_the_host_name_unless_identification_is_off(tmp_path, ca, server_cert):
    keystore, truststore = pem_files(tmp_path, ca, server_cert)
    server = tls.server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=keystore))
    trust = {"ssl_truststore_type": "PEM", "ssl_truststore_location": truststore}
    handshake(server, tls.client_context(settings(**trust)), hostname="localhost")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, tls.client_context(settings(**trust)), hostname="broker-2.example")
    handshake(
        server,
        tls.client_context(settings(**trust, ssl_endpoint_identification_algorithm="")),
        hostname="broker-2.example",
    )


def test_inter_broker_client_refuses_an_untrusted_server(tmp_path, ca, server_cert):
    keystore, _ = pem_files(tmp_path, ca, server_cert)
    other_ca = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    server = tls.server_context(settings(ssl_keystore_type="PEM", ssl_keystore_location=keystore))
    client = tls.client_context(settings(ssl_truststore_type="PEM", ssl_truststore_location=str(other_ca)))
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, client)


# ------------------------------------------------------------------------------ principal


def certificate_with_subject(attributes) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(attributes)
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.DER)


def test_subject_dn_is_printed_as_java_prints_rfc2253():
    der = certificate_with_subject(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    assert tls.subject_dn(der) == "CN=alice,OU=ServiceUsers,O=Acme\\, Inc.,C=US"


def test_attributes_without_an_rfc2253_keyword_are_printed_as_oid_and_hex_der():
    der = certificate_with_subject(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "bob"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "bob@x.org"),
        ]
    )
    # emailAddress is an IA5String (tag 0x16), 9 bytes long.
    assert tls.subject_dn(der) == "1.2.840.113549.1.9.1=#1609626f6240782e6f7267,CN=bob"


def test_authenticate_sets_the_mapped_principal_or_leaves_anonymous(tmp_path, ca, server_cert):
    keystore, truststore = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM", ssl_keystore_location=keystore, ssl_truststore_type="PEM",
            ssl_truststore_location=truststore, ssl_client_auth="requested",
        )
    )
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+).*$/$1/U")
    # A name besides the subject: cryptography 51 refuses a certificate with an empty
    # subjectAltName, which trustme 1.2 writes when given none.
    client_cert = ca.issue_cert("alice.example", common_name="alice", organization_name="Acme")
    session = Session("127.0.0.1:1", "SSL", "SSL")
    assert tls.authenticate(session, mapper, handshake(context, client_trusting(ca, client_cert))) is None
    assert session.principal == KafkaPrincipal("User", "ALICE")

    anonymous = Session("127.0.0.1:2", "SSL", "SSL")
    assert tls.authenticate(anonymous, mapper, handshake(context, client_trusting(ca))) is None
    assert anonymous.principal == ANONYMOUS


def test_authenticate_refuses_a_dn_no_rule_maps(tmp_path, ca, server_cert):
    keystore, truststore = pem_files(tmp_path, ca, server_cert)
    context = tls.server_context(
        settings(
            ssl_keystore_type="PEM", ssl_keystore_location=keystore, ssl_truststore_type="PEM",
            ssl_truststore_location=truststore, ssl_client_auth="required",
        )
    )
    session = Session("127.0.0.1:1", "SSL", "SSL")
    server_side = handshake(context, client_trusting(ca, ca.issue_cert("mallory.example", common_name="mallory")))
    refused = tls.authenticate(session, SslPrincipalMapper("RULE:^CN=alice$/alice/"), server_side)
    assert refused.startswith("No rules apply to CN=mallory")
    assert session.principal == ANONYMOUS


# ------------------------------------------------------------------------------ reloading


def named_cert(ca, *names, unit="brokers"):
    return ca.issue_cert(*names, common_name="broker", organization_name="Example", organization_unit_name=unit)


def write_keystore(path, cert):
    cert.private_key_and_cert_chain_pem.write_to_path(str(path))
    return str(path)


def test_reload_with_the_same_settings_and_files_builds_nothing(tmp_path, ca):
    location = write_keystore(tmp_path / "a.pem", named_cert(ca, "localhost"))
    values = settings(ssl_keystore_type="PEM", ssl_keystore_location=location)
    assert tls.ListenerTls(values).reloaded(values) is None


def test_reload_takes_a_new_keystore_with_the_same_subject_and_names(tmp_path, ca):
    old = tls.ListenerTls(
        settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(tmp_path / "a.pem", named_cert(ca, "localhost")))
    )
    renewed = named_cert(ca, "localhost", "127.0.0.1")  # a name more is allowed
    new_settings = settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(tmp_path / "b.pem", renewed))
    new = old.reloaded(new_settings)
    assert new.certificate.serial_number == x509.load_pem_x509_certificate(renewed.cert_chain_pems[0].bytes()).serial_number
    handshake(new.context, client_trusting(ca))


def test_reload_of_a_keystore_file_replaced_in_place(tmp_path, ca):
    path = tmp_path / "a.pem"
    values = settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(path, named_cert(ca, "localhost")))
    old = tls.ListenerTls(values)
    write_keystore(path, named_cert(ca, "localhost"))
    new = old.reloaded(values)
    assert new is not None and new.certificate.serial_number != old.certificate.serial_number


def test_reload_refuses_another_subject_or_fewer_names_as_kafka_does(tmp_path, ca):
    old = tls.ListenerTls(
        settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(tmp_path / "a.pem", named_cert(ca, "localhost", "127.0.0.1")))
    )
    other_dn = settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(tmp_path / "b.pem", named_cert(ca, "localhost", "127.0.0.1", unit="other")))
    with pytest.raises(ConfigError, match="Validation of dynamic config update of SSLFactory failed: Keystore DistinguishedName does not match"):
        old.reloaded(other_dn)
    assert old.reloaded({**other_dn, "ssl.allow.dn.changes": True}) is not None
    fewer_names = settings(ssl_keystore_type="PEM", ssl_keystore_location=write_keystore(tmp_path / "c.pem", named_cert(ca, "localhost")))
    with pytest.raises(ConfigError, match="Keystore SubjectAltNames do not match"):
        old.reloaded(fewer_names)
    assert old.reloaded({**fewer_names, "ssl.allow.san.changes": True}) is not None


def test_reload_cannot_add_a_truststore(tmp_path, ca):
    location = write_keystore(tmp_path / "a.pem", named_cert(ca, "localhost"))
    old = tls.ListenerTls(settings(ssl_keystore_type="PEM", ssl_keystore_location=location))
    with pytest.raises(ConfigError, match="Cannot add SSL truststore to an existing listener"):
        old.reloaded(
            settings(ssl_keystore_type="PEM", ssl_keystore_location=location, ssl_truststore_type="PEM",
                     ssl_truststore_certificates=ca.cert_pem.bytes().decode())
        )


def test_inline_pem_written_across_properties_continuation_lines(tmp_path, ca, server_cert):
    """server.properties holds a multi-line value with a backslash at each line's end, which
    Java's Properties (and logway's reader) joins into one line without the line breaks."""
    from broker.config import parse_properties

    def continued(pem: str) -> str:
        return "\\\n    ".join(pem.strip().splitlines())

    text = (
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.key={continued(server_cert.private_key_pem.bytes().decode())}\n"
        f"ssl.keystore.certificate.chain={continued(server_cert.cert_chain_pems[0].bytes().decode())}\n"
    )
    props = parse_properties(text)
    assert "\n" not in props["ssl.keystore.key"]
    context = tls.server_context(settings(**{k.replace(".", "_"): v for k, v in props.items()}))
    handshake(context, client_trusting(ca))
