"""ssl.principal.mapping.rules: a TLS client certificate's subject DN to a principal name.

The syntax and semantics are Kafka's SslPrincipalMapper: a comma separated list of rules, tried
in order, the first that applies giving the name.

- `DEFAULT`: the DN unchanged.
- `RULE:pattern/replacement/` with an optional `L` or `U` after the last slash (lower or upper
  case the result): applies when the Java regular expression `pattern` matches the whole DN; the
  name is then the DN with every match of `pattern` replaced by `replacement` (Java's
  replaceAll: `$1` refers to a group, a backslash quotes the next character). A `/` or `\\`
  inside pattern or replacement is written `\\/`, `\\\\`.

No rule applying is an error (NoMatchingRule), which fails the client's authentication, as in
Kafka. Empty entries (",,") are ignored. Patterns are compiled with Python's `re`, which reads
the usual Java constructs alike (groups, classes, lazy quantifiers, anchors).
"""

import re

DEFAULT_RULES = "DEFAULT"

# Kafka's RULE_PATTERN, whose groups are: 1 DEFAULT, 2 pattern, 4 replacement, 6 L/U; the last
# alternative matches the empty string, so anything else fails as an unmatched substring.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    """No rule maps this DN."""


class _Rule:
    def __init__(self, pattern: str | None = None, replacement: str = "", case: str = "") -> None:
        self.is_default = pattern is None
        self.source = pattern
        self.pattern = None if pattern is None else re.compile(pattern)
        self.replacement = replacement
        self.case = case

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda match: _java_replacement(self.replacement, match, groups), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        text = f"RULE:{self.source}/{self.replacement}"
        return text + (f"/{self.case}" if self.case else "")


class SslPrincipalMapper:
    def __init__(self, rules: str | None = DEFAULT_RULES) -> None:
        """Parse `rules`; ValueError("Invalid rule: ...") when one cannot be read."""
        self.rules = [_parse(rule) for rule in _split(DEFAULT_RULES if rules is None else rules)]
        self.rules = [rule for rule in self.rules if rule is not None]

    def name(self, dn: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _SPLITTER.finditer(rules.strip())]


def _parse(rule: str) -> _Rule | None:
    match = _PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
    if match.group(1) is not None:
        return _Rule()
    if match.group(2) is not None:
        try:
            return _Rule(match.group(2), match.group(4), match.group(6))
        except re.error as exc:
            raise ValueError(f"Invalid rule: {rule}: {exc}") from None
    return None  # an empty entry


def _java_replacement(replacement: str, match: re.Match, groups: int) -> str:
    """Java's Matcher.appendReplacement: `\\x` is x; `$n` is group n, read digit by digit while
    the number stays a group ($0 the whole match); a `$n` naming no group is literal text, as
    Kafka quotes it before replacing."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if char == "$" and groups:
            reference = _BACK_REFERENCE.match(replacement, i)
            if reference is not None:
                digits = reference.group(1)
                number = int(digits[0])
                if number > groups:
                    out.append("$")  # Kafka quotes a reference to no group: a literal dollar
                    i += 1
                    continue
                used = 1
                while used < len(digits) and number * 10 + int(digits[used]) <= groups:
                    number = number * 10 + int(digits[used])
                    used += 1
                out.append(match.group(number) or "")
                i += 1 + used
                continue
        out.append(char)
        i += 1
    return "".join(out)
