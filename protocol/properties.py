"""Java .properties files, as java.util.Properties.load reads them: the broker's server.properties
and the mirror's configuration both use this one parser."""

import re


class PropertiesError(ValueError):
    """The text is not a valid properties file."""


_PROPS_WS = " \t\f"
_NEWLINE_RE = re.compile(r"\r\n|\r|\n")
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a Java .properties file into {key: value}; later keys win.

    Lines whose first non-blank character is '#' or '!' are comments. A line ending in an odd
    number of backslashes continues on the next one, whose leading blanks are dropped. The key
    ends at the first unescaped '=', ':' or blank; blanks around the separator are skipped and
    the value runs to the end of the line, trailing unescaped blanks trimmed. Escapes: \\t \\n
    \\r \\f \\uXXXX, and a backslash before any other character stands for that character.
    A malformed \\uXXXX is a PropertiesError.
    """
    result: dict[str, str] = {}
    lines = _NEWLINE_RE.split(text)
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(_PROPS_WS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index >= len(lines):
                break
            line += lines[index].lstrip(_PROPS_WS)
            index += 1
        key, value = _split_entry(line)
        result[key] = value
    return result


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line into (key, value), unescaping both."""
    length = len(line)
    pos = 0
    escaped = False
    value_start = length
    has_separator = False
    while pos < length:
        char = line[pos]
        if not escaped and char in "=:":
            value_start = pos + 1
            has_separator = True
            break
        if not escaped and char in _PROPS_WS:
            value_start = pos + 1
            break
        escaped = (char == "\\") and not escaped
        pos += 1
    key_end = pos
    while value_start < length:
        char = line[value_start]
        if char not in _PROPS_WS:
            if not has_separator and char in "=:":
                has_separator = True
            else:
                break
        value_start += 1
    key, _ = _unescape(line[:key_end])
    value, protected = _unescape(line[value_start:])
    value = value[:protected] + value[protected:].rstrip(_PROPS_WS)
    return key, value


def _unescape(text: str) -> tuple[str, int]:
    """Resolve escapes; also return the length of the prefix that ends at the last escape."""
    if "\\" not in text:
        return text, 0
    out: list[str] = []
    protected = 0
    pos = 0
    length = len(text)
    while pos < length:
        char = text[pos]
        pos += 1
        if char != "\\":
            out.append(char)
            continue
        if pos >= length:  # a lone trailing backslash stands for nothing
            break
        char = text[pos]
        pos += 1
        if char == "u":
            digits = text[pos : pos + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"Malformed \\uxxxx encoding in properties: {text!r}")
            out.append(chr(int(digits, 16)))
            pos += 4
        else:
            out.append(_SIMPLE_ESCAPES.get(char, char))
        protected = len(out)
    return "".join(out), protected
