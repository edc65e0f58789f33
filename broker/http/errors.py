"""The REST Proxy's error bodies: {"error_code": ..., "message": ...} with its status codes.

error_code values are the proxy's (io.confluent.kafkarest.Errors and its exception mappers):
the HTTP status, or the status followed by two digits. Kafka error codes map as the proxy's
KafkaExceptionMapper maps the exceptions behind them.
"""

from aiohttp import web

from protocol.errors import ErrorCode

TOPIC_NOT_FOUND = 40401  # v2
PARTITION_NOT_FOUND = 40402  # v2
CONSUMER_INSTANCE_NOT_FOUND = 40403  # v2
UNKNOWN_TOPIC_OR_PARTITION = 40403  # v3: "This server does not host this topic-partition."
CONSUMER_ALREADY_EXISTS = 40902
CONSUMER_FORMAT_MISMATCH = 40601
UNSUPPORTED_MEDIA_TYPE = 415
INVALID_CONSUMER_CONFIG = 42204

# Kafka error -> (HTTP status, REST error_code)
_KAFKA_ERRORS = {
    ErrorCode.unknown_topic_or_partition: (404, UNKNOWN_TOPIC_OR_PARTITION),
    ErrorCode.topic_authorization_failed: (403, 40301),
    ErrorCode.group_authorization_failed: (403, 40301),
    ErrorCode.cluster_authorization_failed: (403, 40301),
    ErrorCode.topic_already_exists: (400, 40002),
    ErrorCode.invalid_partitions: (400, 40002),
    ErrorCode.invalid_replication_factor: (400, 40002),
    ErrorCode.invalid_topic_exception: (400, 40002),
    ErrorCode.invalid_config: (400, 40002),
    ErrorCode.invalid_request: (400, 40002),
    ErrorCode.policy_violation: (400, 40002),
    ErrorCode.record_list_too_large: (413, 413),
    ErrorCode.message_too_large: (413, 413),
    ErrorCode.request_timed_out: (408, 408),
    ErrorCode.not_enough_replicas: (500, 50003),
    ErrorCode.not_enough_replicas_after_append: (500, 50003),
}
_MESSAGES = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
}


class RestError(Exception):
    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def response(self) -> web.Response:
        return web.json_response({"error_code": self.error_code, "message": self.message}, status=self.status)


def kafka_error(error: int, message: str | None = None) -> RestError:
    """The proxy's answer to a Kafka error code."""
    code = ErrorCode(error)
    status, error_code = _KAFKA_ERRORS.get(code, (500, 50002))  # 50002: Kafka error
    return RestError(status, error_code, message or _MESSAGES.get(code) or code.name.upper())
