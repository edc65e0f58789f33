"""TLS contexts from Kafka's ssl.* settings, and the principal of a TLS peer.

    context = server_context(config.ssl_settings("SSL"))    # a listener's
    context = client_context(config.ssl_settings("SSL"))    # the inter-broker client's
    authenticate(session, mapper, ssl_object)                # after a listener's handshake
    listener = ListenerTls(settings); listener.reloaded(new_settings)   # dynamic keystores

`settings` maps Kafka's key names (ssl.keystore.type, ...) to typed values, as
BrokerConfig.ssl_settings resolves them for one listener. What Kafka's DefaultSslEngineFactory
checks is checked here with its messages, raised as ConfigError so that the broker does not
start:

- Keystore: PKCS12 (`ssl.keystore.location`, `ssl.keystore.password`) or PEM (KIP-651): a file
  at `ssl.keystore.location` holding the private key and the certificate chain, or the inline
  `ssl.keystore.key` and `ssl.keystore.certificate.chain`; `ssl.key.password` decrypts an
  encrypted key. JKS cannot be read (no Java): refused, saying how to convert it.
- Truststore: PKCS12 (location, password optional as in Java) or PEM (location or inline
  `ssl.truststore.certificates`). Unset: the system's CAs, as Kafka uses the JVM's cacerts.
- `ssl.enabled.protocols`, `ssl.cipher.suites` (IANA names, as Java takes them; OpenSSL
  names are accepted too), `ssl.client.auth`, `ssl.endpoint.identification.algorithm`.

Private keys reach OpenSSL through an anonymous in-memory file (memfd) holding the key
encrypted with a one-time password, never through a file on disk.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.config import ConfigError
from broker.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper
from broker.session import KafkaPrincipal, Session

# cryptography (about a tenth of logway-admin's start-up) is imported by the functions that read
# a store or a certificate, so that a broker or tool without TLS does not load it.
if TYPE_CHECKING:
    from cryptography import x509

# What IncrementalAlterConfigs may change on a running broker (Kafka's
# SslConfigs.RECONFIGURABLE_CONFIGS), plain or per listener.
RECONFIGURABLE = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
})

PEM = "PEM"
PKCS12 = "PKCS12"
JKS = "JKS"

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_VERSION_ORDER = list(_VERSIONS)
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# OpenSSL's TLS 1.3 suites: Python's ssl module enables all of them and cannot choose among them.
_TLS13_SUITES = frozenset({"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"})


def server_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """The context of a listener: its keystore (required), client authentication as
    ssl.client.auth says, client certificates checked against the truststore."""
    return ListenerTls(settings).context


class ListenerTls:
    """A listener's TLS: its context, its principal mapper, and what a reload compares.

    `reloaded(settings)` serves dynamic reconfiguration (IncrementalAlterConfigs), with Kafka's
    rules (SslFactory): nothing is rebuilt when the settings are the same and the keystore and
    truststore files are unmodified; otherwise the new keystore must keep the old certificate's
    subject DN (unless ssl.allow.dn.changes) and all its subject alternative names (unless
    ssl.allow.san.changes), and a truststore cannot be added to a listener that had none.
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        self._stamps = _file_stamps(settings)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _common(context, settings)
        keystore = load_keystore(settings)
        if keystore is None:
            raise ConfigError(
                "SSL key store is not specified: a listener with security protocol SSL needs "
                "ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain"
            )
        _load_key_and_chain(context, *keystore)
        self.certificate = keystore[1][0]
        self.has_truststore = _truststore_given(settings)
        context.verify_mode = _CLIENT_AUTH[settings["ssl.client.auth"]]
        if context.verify_mode != ssl.CERT_NONE:
            _load_trust(context, settings, ssl.Purpose.CLIENT_AUTH)
        self.context = context
        self.mapper = SslPrincipalMapper(settings["ssl.principal.mapping.rules"])

    def reloaded(self, settings: Mapping[str, Any]) -> "ListenerTls | None":
        """This listener's TLS built anew from `settings`, or None when nothing changed;
        ConfigError (Kafka's words) when the new keystore or truststore cannot replace the old."""
        if dict(settings) == self.settings and _file_stamps(settings) == self._stamps:
            return None
        try:
            new = ListenerTls(settings)
            if not self.has_truststore and new.has_truststore:
                raise ConfigError(
                    "Cannot add SSL truststore to an existing listener for which no truststore was configured."
                )
            _ensure_compatible(self.certificate, new.certificate, settings)
        except ConfigError as exc:
            raise ConfigError(f"Validation of dynamic config update of SSLFactory failed: {exc}") from None
        return new


def _file_stamps(settings: Mapping[str, Any]) -> tuple:
    """The keystore and truststore files' digests: a reload with the same settings rebuilds the
    context if either file changed (Kafka looks at their modification times, which a quick
    rewrite can leave unchanged)."""
    stamps = []
    for key in ("ssl.keystore.location", "ssl.truststore.location"):
        location = settings[key]
        try:
            with open(location, "rb") as file:
                stamps.append(hashlib.sha256(file.read()).digest())
        except (OSError, TypeError):  # TypeError: no file configured
            stamps.append(None)
    return tuple(stamps)


def _truststore_given(settings: Mapping[str, Any]) -> bool:
    return settings["ssl.truststore.location"] is not None or settings["ssl.truststore.certificates"] is not None


def _ensure_compatible(old: x509.Certificate, new: x509.Certificate, settings: Mapping[str, Any]) -> None:
    from cryptography.hazmat.primitives import serialization

    if not settings["ssl.allow.dn.changes"]:
        old_dn = subject_dn(old.public_bytes(serialization.Encoding.DER))
        new_dn = subject_dn(new.public_bytes(serialization.Encoding.DER))
        if old_dn.lower() != new_dn.lower():
            raise ConfigError(
                f"Keystore DistinguishedName does not match:  existing={{DN={old_dn}}}, new={{DN={new_dn}}}"
            )
    if not settings["ssl.allow.san.changes"]:
        old_names, new_names = _subject_alt_names(old), _subject_alt_names(new)
        if not old_names <= new_names:
            raise ConfigError(
                f"Keystore SubjectAltNames do not match:  existing={{SAN={sorted(old_names)}}}, "
                f"new={{SAN={sorted(new_names)}}}"
            )


def _subject_alt_names(certificate: x509.Certificate) -> set[str]:
    from cryptography import x509

    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {f"{type(name).__name__}:{name.value}" for name in extension.value}


def client_context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    """The inter-broker client's context: the broker's own keystore as client certificate (if
    any), the server's certificate checked against the truststore, and its host name when
    ssl.endpoint.identification.algorithm is https (Kafka's default)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, settings)
    context.check_hostname = settings["ssl.endpoint.identification.algorithm"].lower() == "https"
    keystore = load_keystore(settings)
    if keystore is not None:
        _load_key_and_chain(context, *keystore)
    _load_trust(context, settings, ssl.Purpose.SERVER_AUTH)
    return context


# ------------------------------------------------------------------------------ settings


def check_settings(settings: Mapping[str, Any]) -> None:
    """What can be told without reading a file: refused values, inconsistent combinations."""
    for name, default in (
        ("ssl.provider", None),
        ("ssl.secure.random.implementation", None),
        ("ssl.engine.factory.class", None),
        ("ssl.keymanager.algorithm", "SunX509"),
        ("ssl.trustmanager.algorithm", "PKIX"),
    ):
        if settings[name] != default:
            raise ConfigError(
                f"Invalid value {settings[name]} for configuration {name}: logway's TLS is "
                f"Python's ssl module over OpenSSL, which has no such choice; leave {name} "
                + ("unset" if default is None else f"at its default {default}")
            )
    protocol = settings["ssl.protocol"]
    if protocol not in ("TLS", *_VERSIONS):
        raise ConfigError(
            f"Invalid value {protocol} for configuration ssl.protocol: expected one of TLS, "
            + ", ".join(_VERSIONS)
        )
    _protocol_range(settings["ssl.enabled.protocols"])
    algorithm = settings["ssl.endpoint.identification.algorithm"]
    if algorithm.lower() not in ("https", ""):
        raise ConfigError(
            f"Invalid value {algorithm} for configuration ssl.endpoint.identification.algorithm: "
            "expected https, or an empty value to disable host name verification"
        )
    for kind in ("keystore", "truststore"):
        store_type = settings[f"ssl.{kind}.type"]
        if store_type == JKS and _store_given(settings, kind):
            raise ConfigError(
                f"Invalid value JKS for configuration ssl.{kind}.type: logway cannot read Java "
                f"key stores; convert it (keytool -importkeystore -srckeystore <file>.jks "
                f"-destkeystore <file>.p12 -deststoretype PKCS12) and set ssl.{kind}.type=PKCS12, "
                "or use PEM"
            )
        if store_type not in (JKS, PEM, PKCS12):
            raise ConfigError(
                f"Invalid value {store_type} for configuration ssl.{kind}.type: expected PEM or PKCS12"
            )
    _check_keystore_combination(settings)
    _check_truststore_combination(settings)
    if settings["ssl.cipher.suites"]:
        _cipher_settings(settings["ssl.cipher.suites"], settings["ssl.enabled.protocols"])


def keystore_given(settings: Mapping[str, Any]) -> bool:
    return settings["ssl.keystore.location"] is not None or settings["ssl.keystore.key"] is not None


def _store_given(settings: Mapping[str, Any], kind: str) -> bool:
    return settings[f"ssl.{kind}.location"] is not None


def _check_keystore_combination(settings: Mapping[str, Any]) -> None:
    store_type = settings["ssl.keystore.type"]
    location = settings["ssl.keystore.location"]
    password = settings["ssl.keystore.password"]
    key = settings["ssl.keystore.key"]
    chain = settings["ssl.keystore.certificate.chain"]
    if key is not None:
        if store_type != PEM:
            raise ConfigError(f"SSL private key can be specified only for PEM, but key store type is {store_type}.")
        if chain is None:
            raise ConfigError("SSL private key is specified, but certificate chain is not specified.")
        if location is not None:
            raise ConfigError("Both SSL key store location and separate private key are specified.")
        if password is not None:
            raise ConfigError(
                "SSL key store password cannot be specified with PEM format, only key password may be specified."
            )
    elif chain is not None:
        raise ConfigError("SSL certificate chain is specified, but private key is not specified")
    elif store_type == PEM and location is not None:
        if password is not None:
            raise ConfigError(
                "SSL key store password cannot be specified with PEM format, only key password may be specified"
            )
    elif location is None and password is not None:
        raise ConfigError("SSL key store is not specified, but key store password is specified.")
    elif location is not None and password is None:
        raise ConfigError("SSL key store is specified, but key store password is not specified.")
    elif location is not None and settings["ssl.key.password"] not in (None, password):
        raise ConfigError(
            "ssl.key.password differs from ssl.keystore.password: logway reads a PKCS12 keystore "
            "and its key with one password (the usual case); leave ssl.key.password unset"
        )


def _check_truststore_combination(settings: Mapping[str, Any]) -> None:
    store_type = settings["ssl.truststore.type"]
    location = settings["ssl.truststore.location"]
    password = settings["ssl.truststore.password"]
    certificates = settings["ssl.truststore.certificates"]
    if certificates is not None:
        if store_type != PEM:
            raise ConfigError(
                f"SSL trust store certs can be specified only for PEM, but trust store type is {store_type}."
            )
        if location is not None:
            raise ConfigError("Both SSL trust store location and separate trust certificates are specified.")
    if store_type == PEM and password is not None and (certificates is not None or location is not None):
        raise ConfigError("SSL trust store password cannot be specified for PEM format.")
    if location is None and certificates is None and password is not None:
        raise ConfigError("SSL trust store is not specified, but trust store password is specified.")


def _protocol_range(protocols: list[str]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """ssl.enabled.protocols as OpenSSL's minimum and maximum version: the set must be one
    unbroken range (OpenSSL cannot leave a version out in the middle)."""
    unknown = [p for p in protocols if p not in _VERSIONS]
    if unknown or not protocols:
        raise ConfigError(
            f"Invalid value {','.join(protocols)} for configuration ssl.enabled.protocols: "
            f"expected versions among {', '.join(_VERSIONS)}"
        )
    positions = sorted({_VERSION_ORDER.index(p) for p in protocols})
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise ConfigError(
            f"Invalid value {','.join(protocols)} for configuration ssl.enabled.protocols: "
            "OpenSSL enables a range of versions; list consecutive versions"
        )
    return _VERSIONS[_VERSION_ORDER[positions[0]]], _VERSIONS[_VERSION_ORDER[positions[-1]]]


def _cipher_settings(suites: list[str], protocols: list[str]) -> tuple[str | None, bool]:
    """(OpenSSL cipher string for TLS 1.2 and below or None, whether TLS 1.3 stays enabled).

    As with Java, a list without TLS 1.3 suites leaves TLS 1.3 no suite, hence disabled; a list
    with some must name all of OpenSSL's, which Python cannot choose among."""
    tls13 = {suite for suite in suites if suite in _TLS13_SUITES}
    if tls13 and tls13 != _TLS13_SUITES:
        raise ConfigError(
            f"Invalid value {','.join(suites)} for configuration ssl.cipher.suites: logway (Python's "
            "ssl module) cannot restrict TLS 1.3 cipher suites; list all of "
            f"{', '.join(sorted(_TLS13_SUITES))} or none (which disables TLS 1.3)"
        )
    older = [_openssl_cipher_name(suite) for suite in suites if suite not in _TLS13_SUITES]
    if not older:
        return None, True
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    known = set()
    for name in older:
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            continue
        known.update(c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3")
    missing = [suite for suite, name in zip((s for s in suites if s not in _TLS13_SUITES), older) if name not in known]
    if missing:
        raise ConfigError(
            f"Invalid value {','.join(suites)} for configuration ssl.cipher.suites: "
            f"unknown or unavailable cipher suites {', '.join(missing)}"
        )
    return ":".join(older), bool(tls13)


def _openssl_cipher_name(suite: str) -> str:
    """An IANA (Java) suite name as OpenSSL names it: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 is
    ECDHE-RSA-AES128-GCM-SHA256; a name that is not IANA's is taken as OpenSSL's."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    exchange, _, cipher = suite[4:].partition("_WITH_")
    exchange = "" if exchange == "RSA" else exchange.replace("_", "-") + "-"
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    return exchange + cipher.replace("_", "-")


def _common(context: ssl.SSLContext, settings: Mapping[str, Any]) -> None:
    check_settings(settings)
    minimum, maximum = _protocol_range(settings["ssl.enabled.protocols"])
    if settings["ssl.cipher.suites"]:
        ciphers, keep_tls13 = _cipher_settings(settings["ssl.cipher.suites"], settings["ssl.enabled.protocols"])
        if ciphers is not None:
            context.set_ciphers(ciphers)
        if not keep_tls13 and maximum == ssl.TLSVersion.TLSv1_3:
            maximum = ssl.TLSVersion.TLSv1_2
        if maximum < minimum:
            raise ConfigError(
                "ssl.cipher.suites lists no TLS 1.3 suite and ssl.enabled.protocols only TLSv1.3: "
                "no connection could be made"
            )
    try:
        context.minimum_version = minimum
        context.maximum_version = maximum
    except ValueError as exc:
        raise ConfigError(f"ssl.enabled.protocols: {exc}") from None
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION


# ------------------------------------------------------------------------------ stores


def load_keystore(settings: Mapping[str, Any]) -> tuple[Any, list[x509.Certificate]] | None:
    """(private key, certificate chain, leaf first) of the keystore, or None when none is set."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    location = settings["ssl.keystore.location"]
    key_password = _password(settings["ssl.key.password"])
    if settings["ssl.keystore.key"] is not None:
        return _pem_keystore(settings["ssl.keystore.key"], settings["ssl.keystore.certificate.chain"], key_password, None)
    if location is None:
        return None
    data = _read_store(location, "keystore", settings["ssl.keystore.type"])
    if settings["ssl.keystore.type"] == PEM:
        text = data.decode("ascii", "replace")
        return _pem_keystore(text, text, key_password, location)
    password = _password(settings["ssl.keystore.password"])
    try:
        key, certificate, others = pkcs12.load_key_and_certificates(data, password)
    except ValueError as exc:
        raise ConfigError(
            f"Failed to load SSL keystore {location} of type PKCS12: {_pkcs12_reason(exc)}"
        ) from None
    if key is None or certificate is None:
        raise ConfigError(
            f"Failed to load SSL keystore {location} of type PKCS12: it holds no private key "
            "with its certificate"
        )
    return key, [certificate, *others]


def _pem_keystore(key_text: str, chain_text: str, password: bytes | None, location: str | None):
    from cryptography.hazmat.primitives import serialization

    where = "Invalid PEM keystore configs" if location is None else f"Failed to load PEM SSL keystore {location}"
    keys = _pem_blocks(key_text, ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"))
    if not keys:
        raise ConfigError(f"{where}: Private key not provided")
    if len(keys) != 1:
        raise ConfigError(f"{where}: Expected one private key, but found {len(keys)}")
    try:
        key = serialization.load_pem_private_key(keys[0].encode(), password)
    except TypeError:
        raise ConfigError(
            f"{where}: the private key is encrypted and ssl.key.password is not set"
            if password is None
            else f"{where}: the private key is not encrypted, but ssl.key.password is set"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{where}: Private key could not be loaded ({exc})") from None
    chain = _certificates(chain_text, where)
    return key, chain


def load_truststore(settings: Mapping[str, Any]) -> list[x509.Certificate] | None:
    """The trusted certificates, or None when no truststore is set (the system's CAs)."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    if settings["ssl.truststore.certificates"] is not None:
        return _certificates(settings["ssl.truststore.certificates"], "Invalid PEM truststore configs")
    location = settings["ssl.truststore.location"]
    if location is None:
        return None
    data = _read_store(location, "truststore", settings["ssl.truststore.type"])
    if settings["ssl.truststore.type"] == PEM:
        return _certificates(data.decode("ascii", "replace"), f"Failed to load PEM SSL truststore {location}")
    try:
        store = pkcs12.load_pkcs12(data, _password(settings["ssl.truststore.password"]))
    except ValueError as exc:
        raise ConfigError(
            f"Failed to load SSL truststore {location} of type PKCS12: {_pkcs12_reason(exc)}"
        ) from None
    certificates = [entry.certificate for entry in store.additional_certs]
    if store.cert is not None:
        certificates.insert(0, store.cert.certificate)
    if not certificates:
        raise ConfigError(f"Failed to load SSL truststore {location} of type PKCS12: it holds no certificate")
    return certificates


def _read_store(location: str, kind: str, store_type: str) -> bytes:
    try:
        with open(location, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ConfigError(f"Failed to load SSL {kind} {location} of type {store_type}: {exc.strerror}") from None


def _pkcs12_reason(exc: ValueError) -> str:
    text = str(exc)
    if "password" in text.lower() or "mac" in text.lower():
        return "keystore password was incorrect"
    return text


def _password(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _pem_blocks(text: str, labels: tuple[str, ...]) -> list[str]:
    """The PEM blocks of `text` with one of `labels`, in order; other text is ignored (Kafka
    allows data before and between entries)."""
    blocks = []
    position = 0
    while True:
        start = text.find("-----BEGIN ", position)
        if start < 0:
            return blocks
        label_end = text.find("-----", start + 11)
        if label_end < 0:
            return blocks
        label = text[start + 11 : label_end]
        end_marker = f"-----END {label}-----"
        end = text.find(end_marker, label_end)
        if end < 0:
            return blocks
        if label in labels:
            body = text[label_end + 5 : end]
            if ":" not in body:  # no RFC 1421 headers: the base64 may be on one line, or spaced
                data = "".join(body.split())
                body = "\n" + "\n".join(data[i : i + 64] for i in range(0, len(data), 64)) + "\n"
            blocks.append(f"-----BEGIN {label}-----{body}{end_marker}\n")
        position = end + len(end_marker)


def _certificates(text: str, where: str) -> list[x509.Certificate]:
    from cryptography import x509

    blocks = _pem_blocks(text, ("CERTIFICATE",))
    if not blocks:
        raise ConfigError(f"{where}: At least one certificate expected, but none found")
    try:
        return [x509.load_pem_x509_certificate(block.encode()) for block in blocks]
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _load_key_and_chain(context: ssl.SSLContext, key: Any, chain: list[x509.Certificate]) -> None:
    """Hand a key and chain to OpenSSL, which reads them only from files: both go to one
    in-memory file, the key encrypted with a one-time password."""
    from cryptography.hazmat.primitives import serialization

    password = secrets.token_bytes(32).hex().encode()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password),
    ) + b"".join(certificate.public_bytes(serialization.Encoding.PEM) for certificate in chain)
    with _memory_file(pem) as path:
        try:
            context.load_cert_chain(path, path, password)
        except ssl.SSLError as exc:
            raise ConfigError(f"The SSL key store cannot be used: {exc.reason or exc}") from None


class _memory_file:
    """A path to `data` that lives in memory only (Linux memfd); elsewhere a temporary file."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._fd = -1
        self._temporary: str | None = None

    def __enter__(self) -> str:
        if hasattr(os, "memfd_create"):
            self._fd = os.memfd_create("logway-tls", os.MFD_CLOEXEC)
            os.write(self._fd, self._data)
            return f"/proc/self/fd/{self._fd}"
        fd, self._temporary = tempfile.mkstemp()
        with os.fdopen(fd, "wb") as file:
            file.write(self._data)
        return self._temporary

    def __exit__(self, *exc_info) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        if self._temporary is not None:
            os.unlink(self._temporary)


def _load_trust(context: ssl.SSLContext, settings: Mapping[str, Any], purpose: ssl.Purpose) -> None:
    from cryptography.hazmat.primitives import serialization

    certificates = load_truststore(settings)
    if certificates is None:
        context.load_default_certs(purpose)
        return
    context.load_verify_locations(
        cadata="".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
    )


# ------------------------------------------------------------------------------ principal


def authenticate(session: Session, mapper: SslPrincipalMapper, tls: ssl.SSLObject) -> str | None:
    """After a listener's handshake: the session's principal is User:<the client certificate's
    subject DN, mapped>, or User:ANONYMOUS without a certificate (Kafka's
    DefaultKafkaPrincipalBuilder). Returns why the client is refused: no mapping rule applies."""
    certificate = tls.getpeercert(binary_form=True)
    if not certificate:
        return None
    try:
        session.principal = KafkaPrincipal("User", mapper.name(subject_dn(certificate)))
    except NoMatchingRule as exc:
        return str(exc)
    return None


# The attribute keywords Java's X500Principal writes in RFC 2253 form, by dotted OID; any other
# attribute is written as its OID and the hex of its DER value, as Java does.
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_STRING_ENCODINGS = {30: "utf-16-be", 28: "utf-32-be"}  # BMPString, UniversalString


def subject_dn(certificate_der: bytes) -> str:
    """The certificate's subject as Java's X500Principal.getName() prints it (RFC 2253): the
    most specific RDN first, what Kafka's principal mapping rules are written against."""
    from cryptography import x509

    name = x509.load_der_x509_certificate(certificate_der).subject
    return ",".join(
        "+".join(_attribute_rfc2253(attribute) for attribute in rdn) for rdn in reversed(name.rdns)
    )


def _attribute_rfc2253(attribute: x509.NameAttribute) -> str:
    keyword = _RFC2253_KEYWORDS.get(attribute.oid.dotted_string)
    if keyword is not None:
        return f"{keyword}={_escape(attribute.value)}"
    tag = attribute._type.value  # the ASN.1 string type's tag
    content = attribute.value.encode(_STRING_ENCODINGS.get(tag, "utf-8"))
    return f"{attribute.oid.dotted_string}=#{tag:02x}{_der_length(len(content))}{content.hex()}"


def _der_length(length: int) -> str:
    if length < 0x80:
        return f"{length:02x}"
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return f"{0x80 | len(encoded):02x}{encoded.hex()}"


def _escape(value: str) -> str:
    escaped = "".join("\\" + char if char in ',+"\\<>;' else char for char in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
