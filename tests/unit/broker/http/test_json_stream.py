"""broker.http.json_stream: the JSON values of a body, handed out as their bytes arrive."""

from broker.http.errors import RestError
from broker.http.json_stream import JsonValues

BODY = b'{"a": "x\\"}{["} [1, {"b": [2]}]"s\\\\" 12 true\nnull{"c": "\xc3\xa9"}\n'
VALUES = [{"a": 'x"}{['}, [1, {"b": [2]}], "s\\", 12, True, None, {"c": "\u00e9"}]


def parse(pieces, max_bytes=1000) -> list:
    values = JsonValues(max_bytes)
    found = []
    for piece in pieces:
        found += values.feed(piece)
    return found + values.end()


def describe(found: list) -> list:
    return [(v.status, v.error_code) if isinstance(v, RestError) else v for v in found]


def test_concatenated_and_separated_values_are_found_however_the_body_is_cut():
    # Cut anywhere: inside strings, between an escape and what it escapes, inside a UTF-8 letter.
    assert parse([BODY]) == VALUES
    for size in (1, 2, 3, 7):
        assert parse([BODY[i : i + size] for i in range(0, len(BODY), size)]) == VALUES


def test_each_value_is_handed_out_as_soon_as_its_last_byte_is_in():
    values = JsonValues(1000)
    assert values.feed(b'{"a": 1}{"b"') == [{"a": 1}]
    assert values.feed(b": 2}") == [{"b": 2}]
    # A number may go on in the next piece: it is complete at what follows it or the end.
    assert values.feed(b" 12") == []
    assert values.feed(b"3 ") == [123]
    assert values.feed(b"4") == []
    assert values.end() == [4]


def test_a_value_that_is_not_json_is_a_400_in_its_place_and_nothing_follows():
    assert describe(parse([b'{"a": 1} {"a": tru} {"b": 2}'])) == [{"a": 1}, (400, 400)]
    assert describe(parse([b'{"a": 1}}{"b": 2}'])) == [{"a": 1}, (400, 400)]
    assert describe(parse([b'"\xff" {}'])) == [(400, 400)]
    assert describe(parse([b'{"a": 1} {"b": '])) == [{"a": 1}, (400, 400)]


def test_a_value_over_max_bytes_is_a_413_before_its_end_arrives():
    # What the broker holds of a value is bounded, however long the client writes it.
    values = JsonValues(100)
    assert values.feed(b'{"a": 1} {"b": "' + b"x" * 60) == [{"a": 1}]
    assert describe(values.feed(b"x" * 60)) == [(413, 413)]
    assert values.ended
    assert values.feed(b'"} {"c": 3}') == [] and values.end() == []


def test_an_empty_or_blank_body_has_no_value():
    assert parse([b""]) == [] and parse([b" \n", b"\t"]) == []
