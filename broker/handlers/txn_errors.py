"""Error codes of the transactional APIs as older clients know them: PRODUCER_FENCED (KIP-588)
is answered as INVALID_PRODUCER_EPOCH to versions before the one that introduced it."""

from protocol.errors import ErrorCode


def for_version(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    if error is ErrorCode.producer_fenced and version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error
