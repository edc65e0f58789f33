import pytest

from protocol.properties import PropertiesError, parse_properties


def test_parses_java_properties():
    assert parse_properties("# comment\na = 1\nb: two \\\n  lines\n") == {"a": "1", "b": "two lines"}


def test_a_malformed_unicode_escape_is_an_error():
    with pytest.raises(PropertiesError, match="Malformed"):
        parse_properties("a=\\u12")
