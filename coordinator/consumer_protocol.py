"""What the coordinator reads of the "consumer" protocol's member metadata: the subscribed topics.

A consumer's JoinGroup metadata is an INT16 version followed by a ConsumerProtocolSubscription of
that version (topics, user data, owned partitions, generation, rack). The coordinator never
needs more than the topics: a group's subscription decides whether OffsetDelete may remove a
topic's offsets and whether a stable group's offsets of other topics expire. A version newer
than kio knows is read with the newest layout, as Kafka does: versions only add fields at the
end.
"""

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription as V0
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription as V1
from kio.schema.consumer_protocol_subscription.v2 import ConsumerProtocolSubscription as V2
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription as V3

from protocol import schemas
from protocol.errors import ProtocolError
from protocol.primitives import INT16

CONSUMER_PROTOCOL_TYPE = "consumer"
_SUBSCRIPTION_VERSIONS = (V0, V1, V2, V3)


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics of a consumer's subscription; ProtocolError when it does not parse."""
    if len(metadata) < INT16.size:
        raise ProtocolError("consumer subscription shorter than its version")
    (version,) = INT16.unpack_from(metadata)
    if version < 0:
        raise ProtocolError(f"consumer subscription has negative version {version}")
    layout = _SUBSCRIPTION_VERSIONS[min(version, len(_SUBSCRIPTION_VERSIONS) - 1)]
    subscription = schemas.decode(layout, memoryview(metadata), INT16.size)
    return frozenset(subscription.topics)
