"""DeleteTopics (api key 20), versions 0-6.

Deletes each topic named (v0-5: `topic_names`; v6: `topics`, each by name or by topic id). A
deleted topic leaves the cluster metadata at once and its partitions stop being served; each
partition's directory is renamed and removed in the background (after file.delete.delay.ms), so
the answer does not wait for the files. A topic of the same name can be created right away.

Errors, per topic: UNKNOWN_TOPIC_OR_PARTITION for a name, UNKNOWN_TOPIC_ID for an id (v6) that
matches no topic; INVALID_REQUEST for a topic named twice, for a v6 entry with both a name and
an id, or with neither; with delete.topic.enable=false every topic gets TOPIC_DELETION_DISABLED
(v3+), or INVALID_REQUEST before v3, whose clients do not know that code.

Version notes: v1 adds throttle time; v4 is flexible; v5 adds error messages; v6 names topics by
name or id and answers with the topic ids.

Cluster mode: served by the controller only (others: NOT_CONTROLLER), for topics in its metadata
(others, deleted ones whose deletion is still under way among them, get
UNKNOWN_TOPIC_OR_PARTITION, as from Kafka); the topic is marked in /admin/delete_topics and the
controller removes it from every broker; the answer waits until it has left this broker's
metadata (REQUEST_TIMED_OUT after 30 s). Its znodes stay until every
replica has deleted its partitions (a broker that is down does so when it is back), and until
then a topic of that name cannot be created (TOPIC_ALREADY_EXISTS, "marked for deletion").

Authorization (with an authorizer, as Kafka's KafkaApis): DELETE on the topic, else
TOPIC_AUTHORIZATION_FAILED (checked before its existence); a topic named by id also needs
DESCRIBE, else it answers TOPIC_AUTHORIZATION_FAILED without its name.
"""

import datetime
import uuid
from collections import Counter

from kio.schema.delete_topics.v6.response import DeletableTopicResult, DeleteTopicsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.authorization import authorized
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType

FIRST_VERSION_WITH_DELETION_DISABLED = 3

Target = tuple[str | None, uuid.UUID | None]


# v0-5 name topics in `topic_names`, v6 in `topics`: copying fields by name cannot map one to the other.
@api(ApiKey.DELETE_TOPICS, versions=(0, 6), parse=as_sent(ApiKey.DELETE_TOPICS))
async def handle_delete_topics(ctx: RequestContext, request) -> DeleteTopicsResponse:
    if ctx.api_version < 6:
        targets: list[Target] = [(name, None) for name in request.topic_names]
    else:
        targets = [(topic.name, topic.topic_id) for topic in request.topics]
    if not ctx.broker.config.get("delete.topic.enable"):
        refusal = _deletion_disabled(ctx.api_version)
        return _response([_error(name, topic_id, refusal) for name, topic_id in targets])
    try:
        ctx.broker.require_controller()
    except KafkaError as exc:
        return _response([_error(name, topic_id, exc) for name, topic_id in targets])
    names = Counter(name for name, topic_id in targets if topic_id is None)
    ids = Counter(topic_id for name, topic_id in targets if name is None)
    results = []
    for name, topic_id in targets:
        try:
            _check_target(name, topic_id, names, ids)
            if name is None:
                # Named by id: a caller that may not DESCRIBE the topic does not learn its name
                name = ctx.broker.topics.find_by_id(topic_id).name
                if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    raise KafkaError("", ErrorCode.topic_authorization_failed)
            if not authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
                results.append(_error(name, topic_id, KafkaError("", ErrorCode.topic_authorization_failed)))
                continue
            results.append(await _delete(ctx, name, None))
        except KafkaError as exc:
            results.append(_error(name, topic_id, exc))
    return _response(results)


def _deletion_disabled(version: int) -> KafkaError:
    if version < FIRST_VERSION_WITH_DELETION_DISABLED:
        return KafkaError("Topic deletion is disabled.", ErrorCode.invalid_request)
    return KafkaError("Topic deletion is disabled.", ErrorCode.topic_deletion_disabled)


def _check_target(name: str | None, topic_id: uuid.UUID | None, names: Counter, ids: Counter) -> None:
    def invalid(reason: str) -> KafkaError:
        return KafkaError(reason, ErrorCode.invalid_request)

    if name is not None and topic_id is not None:
        raise invalid("You may not specify both topic name and topic id.")
    if name is None and topic_id is None:
        raise invalid("Neither topic name nor id were specified.")
    if name is not None and names[name] > 1:
        raise invalid("Duplicate topic name.")
    if topic_id is not None and ids[topic_id] > 1:
        raise invalid("Duplicate topic id.")


async def _delete(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> DeletableTopicResult:
    topics = ctx.broker.topics
    if name is not None:
        await topics.catch_up(name)
    info = topics.get(name) if name is not None else topics.find_by_id(topic_id)
    await topics.delete(info.name)
    return DeletableTopicResult(
        name=info.name, topic_id=info.topic_id, error_code=ErrorCode.none, error_message=None
    )


def _error(name: str | None, topic_id: uuid.UUID | None, exc: KafkaError) -> DeletableTopicResult:
    return DeletableTopicResult(
        name=name, topic_id=topic_id, error_code=exc.error_code, error_message=str(exc) or None
    )


def _response(results: list[DeletableTopicResult]) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(throttle_time=datetime.timedelta(0), responses=tuple(results))
