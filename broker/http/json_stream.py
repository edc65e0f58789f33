"""The JSON values of a request body, handed out as their bytes arrive.

The REST Proxy's v3 produce takes records one after another, concatenated or separated by
whitespace, in a body that may be streamed (chunked) for as long as the client writes.
JsonValues is fed the body in pieces and hands out each value once its last byte is in: an
object or array when its brackets close, a string when its quote closes, a number, true, false or
null when whitespace or the next value follows it or the body ends. Boundaries are found by
scanning brackets, strings and their escapes, with the scan's state kept between pieces, so a
value arriving in many pieces is scanned once; each value is then parsed with json.loads.

A value that is not JSON is handed out as a RestError 400 in its place, a value still incomplete
past `max_bytes` (http.max.request.bytes, so no record makes the broker buffer without bound) or
at the end of the body as a RestError 413 or 400; after an error nothing more is handed out, as
the proxy ends its stream there (where the next value starts cannot be known).
"""

import json
import re

from broker.http.errors import RestError

_WHITESPACE = b" \t\r\n"
_STRUCTURE = re.compile(rb'[\[\]{}"]')  # what changes the depth of an object or array
_IN_STRING = re.compile(rb'["\\]')
_SCALAR_END = re.compile(rb'[ \t\r\n\[\]{}"]')


def malformed(reason: object) -> RestError:
    """The proxy's JsonParseExceptionMapper answer."""
    return RestError(400, 400, f"Unexpected character or malformed JSON: {reason}")


class JsonValues:
    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._buffer = bytearray()  # from the value being scanned, or what follows the last one
        self._start: int | None = None  # where the value being scanned starts, None between values
        self._scan = 0  # how far the buffer has been scanned
        self._depth = 0  # open objects and arrays; 0 in a top-level string or scalar
        self._in_string = False
        self.ended = False  # an error was handed out: nothing follows it

    def feed(self, data: bytes) -> list:
        """The values completed by `data`, a RestError last in place of a bad one."""
        if self.ended:
            return []
        self._buffer += data
        values = []
        while not self.ended and (end := self._value_end()) is not None:
            values.append(self._take(end))
        if not self.ended and self._start is not None and len(self._buffer) - self._start > self._max_bytes:
            values.append(self._fail(self._too_large()))
        consumed = self._scan if self._start is None else self._start
        del self._buffer[:consumed]
        self._scan -= consumed
        if self._start is not None:
            self._start -= consumed
        return values

    def end(self) -> list:
        """At the end of the body: a number, true, false or null it ends, or the error of a value
        it cuts."""
        if self.ended or self._start is None:
            return []
        if self._depth == 0 and not self._in_string:
            return [self._take(len(self._buffer))]
        return [self._fail(malformed("the body ends inside a value"))]

    def _value_end(self) -> int | None:
        """Where the value being scanned (or the next one) ends; None when it goes on past the
        buffer."""
        buffer = self._buffer
        if self._start is None:
            position = self._scan
            while position < len(buffer) and buffer[position] in _WHITESPACE:
                position += 1
            self._scan = position
            if position == len(buffer):
                return None
            self._start, self._scan = position, position + 1
            first = buffer[position]
            self._depth = 1 if first in b"{[" else 0
            self._in_string = first == ord('"')
        position = self._scan
        if self._depth == 0 and not self._in_string:
            found = _SCALAR_END.search(buffer, position)
            self._scan = len(buffer) if found is None else found.start()
            return None if found is None else found.start()
        while True:
            found = (_IN_STRING if self._in_string else _STRUCTURE).search(buffer, position)
            if found is None:
                self._scan = len(buffer)
                return None
            position, byte = found.end(), buffer[found.start()]
            if byte == ord("\\"):
                if position == len(buffer):  # the escaped byte is still to come
                    self._scan = found.start()
                    return None
                position += 1
            elif byte == ord('"'):
                self._in_string = not self._in_string
                if self._depth == 0:  # a top-level string closed
                    return position
            elif byte in b"{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    return position

    def _take(self, end: int):
        start, self._start, self._scan = self._start, None, end
        self._depth, self._in_string = 0, False
        if end - start > self._max_bytes:
            return self._fail(self._too_large())
        try:
            return json.loads(self._buffer[start:end].decode())
        except ValueError as exc:  # UnicodeDecodeError too
            return self._fail(malformed(exc))

    def _too_large(self) -> RestError:
        return RestError(413, 413, f"A record is larger than http.max.request.bytes ({self._max_bytes})")

    def _fail(self, error: RestError) -> RestError:
        self.ended = True
        self._buffer.clear()
        self._start, self._scan = None, 0
        return error
