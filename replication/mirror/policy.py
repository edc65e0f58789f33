"""Which topics a flow mirrors and what they are called on the target: MirrorMaker 2's
DefaultReplicationPolicy (a remote topic is `<source alias><separator><topic>`) and its
MirrorSourceConnector.shouldReplicateTopic (the include and exclude patterns, heartbeats always,
internal topics never, and no cycles)."""

import re
from dataclasses import dataclass

HEARTBEATS_TOPIC = "heartbeats"


@dataclass(frozen=True)
class ReplicationPolicy:
    separator: str = "."

    def remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The alias a remote topic came from (its first component), None for a local topic."""
        source, found, _ = topic.partition(self.separator)
        return source if found else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def offsets_topic(self, source_alias: str) -> str:
        """The compacted topic on the target holding the flow's (source offset, target offset)
        pairs: the name MirrorMaker 2 gives, on the target, to the offsets of its source
        connector for that source (MirrorMakerConfig: mm2-offsets.<source>.internal)."""
        return f"mm2-offsets.{source_alias}.internal"

    def checkpoints_topic(self, source_alias: str) -> str:
        """DefaultReplicationPolicy.checkpointsTopic: on the target, the groups' translated offsets."""
        return f"{source_alias}.checkpoints.internal"

    def is_internal_topic(self, topic: str) -> bool:
        """ReplicationPolicy.isInternalTopic: Kafka's own topics and MirrorMaker's."""
        return topic.startswith("__") or topic.startswith(".") or topic.endswith(".internal") or topic.endswith("-internal")

    def is_heartbeats_topic(self, topic: str) -> bool:
        """`heartbeats`, or a remote copy of it (`A.heartbeats`, `B.A.heartbeats`)."""
        while topic is not None:
            if topic == HEARTBEATS_TOPIC:
                return True
            topic = self.upstream_topic(topic)
        return False

    def is_cycle(self, topic: str, target_alias: str) -> bool:
        """True when the topic came, directly or through other clusters, from the target: mirroring
        it there would loop."""
        while (source := self.topic_source(topic)) is not None:
            if source == target_alias:
                return True
            topic = self.upstream_topic(topic)
        return False

    def should_replicate(self, topic: str, target_alias: str, include: re.Pattern, exclude: re.Pattern) -> bool:
        selected = bool(include.fullmatch(topic)) and not exclude.fullmatch(topic)
        return (
            (selected or self.is_heartbeats_topic(topic))
            and not self.is_internal_topic(topic)
            and not self.is_cycle(topic, target_alias)
        )
