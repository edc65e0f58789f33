"""Kafka error codes and the exceptions protocol/ raises.

`ErrorCode` is kio's enum (generated from Kafka's own error table), re-exported so the rest of
logway names error codes in one way. Two kinds of failure are kept apart:

- `ProtocolError`: the bytes cannot be parsed as the message they claim to be. The connection that
  sent them cannot be trusted to stay in sync and is closed.
- `KafkaError` subclasses: a well-formed request that is refused. They carry the error code that
  goes back to the client, per partition where the protocol allows it.
"""

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "ProtocolError",
    "KafkaError",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordsTooLargeError",
    "UnsupportedMessageFormatError",
]


class ProtocolError(ValueError):
    """Bytes that do not parse as the expected Kafka structure."""


class KafkaError(Exception):
    """A refusal that maps to one Kafka error code."""

    error_code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class CorruptRecordError(KafkaError):
    """A record batch whose framing or checksum is wrong (CORRUPT_MESSAGE)."""

    error_code = ErrorCode.corrupt_message


class InvalidRecordError(KafkaError):
    """A well-formed record batch that breaks a rule of the log (INVALID_RECORD)."""

    error_code = ErrorCode.invalid_record


class RecordsTooLargeError(KafkaError):
    """Records that decompress to more than the bound they were decoded under
    (MESSAGE_TOO_LARGE, as for a batch over max.message.bytes)."""

    error_code = ErrorCode.message_too_large


class UnsupportedMessageFormatError(KafkaError):
    """A message set in a format older than record batch v2 (UNSUPPORTED_FOR_MESSAGE_FORMAT)."""

    error_code = ErrorCode.unsupported_for_message_format
