"""JAAS configuration text as Kafka's `sasl.jaas.config` holds it.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

One or more entries `<login module class> <flag> [<key>=<value> ...];`, the flag one of
required, requisite, sufficient, optional (case-insensitive), values quoted ("..." or '...')
or bare words; `//` and `/* */` comments are skipped, as Kafka's JaasConfig (a Java
StreamTokenizer) skips them. Options keep their order; a repeated key keeps its last value.
"""

from dataclasses import dataclass

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"

_FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_EXTRA = "._-$"


class JaasConfigError(ValueError):
    """The text is not a JAAS configuration."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every entry of `text`, in order; JaasConfigError when it does not parse."""
    tokens = _tokenize(text)
    entries: list[JaasEntry] = []
    position = 0
    while position < len(tokens):
        kind, module = tokens[position]
        if kind != "word":
            raise JaasConfigError(f"Expected a login module class name in JAAS config, found {module!r}")
        if position + 1 >= len(tokens) or tokens[position + 1][0] != "word":
            raise JaasConfigError(f"Login module control flag not specified in JAAS config for {module}")
        flag = tokens[position + 1][1]
        if flag.lower() not in _FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{flag}' in JAAS config")
        position += 2
        options: dict[str, str] = {}
        while True:
            if position >= len(tokens):
                raise JaasConfigError(f"JAAS config entry for {module} is not terminated by semi-colon")
            kind, value = tokens[position]
            if kind == ";":
                position += 1
                break
            if kind != "word":
                raise JaasConfigError(f"Unexpected {value!r} in JAAS config entry for {module}")
            has_value = (
                position + 2 < len(tokens)
                and tokens[position + 1][0] == "="
                and tokens[position + 2][0] in ("word", "quoted")
            )
            if not has_value:
                raise JaasConfigError(f"Value not specified for key '{value}' in JAAS config")
            options[value] = tokens[position + 2][1]
            position += 3
        entries.append(JaasEntry(module, flag.lower(), options))
    return entries


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char.isspace():
            index += 1
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = length if end < 0 else end + 1
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            if end < 0:
                raise JaasConfigError("Unterminated comment in JAAS config")
            index = end + 2
        elif char in ";=":
            tokens.append((char, char))
            index += 1
        elif char in "\"'":
            value, index = _quoted(text, index)
            tokens.append(("quoted", value))
        elif char.isalnum() or char in _WORD_EXTRA:
            start = index
            while index < length and (text[index].isalnum() or text[index] in _WORD_EXTRA):
                index += 1
            tokens.append(("word", text[start:index]))
        else:
            raise JaasConfigError(f"Unexpected character {char!r} in JAAS config")
    return tokens


def _quoted(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    out: list[str] = []
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index + 1])
            index += 2
            continue
        if char == quote:
            return "".join(out), index + 1
        out.append(char)
        index += 1
    raise JaasConfigError("Unterminated quoted string in JAAS config")
