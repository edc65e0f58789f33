"""Consumer groups failing over: their committed source offsets translated through the offset
pairs, emitted as MirrorMaker 2 checkpoints and (sync.group.offsets.enabled) committed for the
same group on the target.

Translation (OffsetTranslator): a pair (s, t) says that the source record at offset s, if any, is
copied at target offset t or later, and that every source record before s is before t. A group
committed at source offset X resumes on the target at the t of the newest pair with s <= X. The
records between s and X are read twice by the moved consumer; there are fewer of them than the
records of one partition in one mirror transaction (flow.BATCH_RECORDS) when the mirror has
copied past X, and than the mirror's lag on that partition when it has not. None is lost. A group
behind every pair still known is not translated (MirrorMaker 2 skips it too).

The flow's thread runs this between its transactions (flow.MirrorFlow), with the flow's own
transactional producer, so nothing here is shared between threads.
"""

import bisect
import logging
from collections import defaultdict

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from replication.mirror.config import FlowConfig
from replication.mirror.records import Checkpoint, OffsetPair, encode_checkpoint

log = logging.getLogger(__name__)

PAIRS_KEPT = 1024  # per partition: the newest pairs, for groups that lag behind the mirror
_TIMEOUT_S = 30
_TARGET_IDLE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN}


class OffsetTranslator:
    def __init__(self, kept: int = PAIRS_KEPT) -> None:
        self.kept = kept
        self._source: dict[tuple[str, int], list[int]] = defaultdict(list)
        self._target: dict[tuple[str, int], list[int]] = defaultdict(list)

    def add(self, pair: OffsetPair) -> None:
        key = (pair.topic, pair.partition)
        sources, targets = self._source[key], self._target[key]
        if sources and pair.source_offset <= sources[-1]:
            return  # a pair read back from the topic that an older one follows: keep them ordered
        sources.append(pair.source_offset)
        targets.append(pair.target_offset)
        if len(sources) > self.kept:
            del sources[0], targets[0]

    def translate(self, topic: str, partition: int, source_offset: int) -> int | None:
        sources = self._source.get((topic, partition))
        if not sources:
            return None
        index = bisect.bisect_right(sources, source_offset) - 1
        return None if index < 0 else self._target[(topic, partition)][index]


class GroupOffsets:
    """One round of checkpoints for the flow's groups, and optionally their sync on the target."""

    def __init__(self, flow: FlowConfig, checkpoints_topic: str) -> None:
        self.flow = flow
        self.checkpoints_topic = checkpoints_topic

    def checkpoints(self, source_admin: AdminClient, remote_topics: dict[str, str], translator: OffsetTranslator) -> list[Checkpoint]:
        """Each selected source group's committed offsets on mirrored topics, translated.
        `remote_topics`: source topic -> target topic."""
        listed = source_admin.list_consumer_groups(request_timeout=_TIMEOUT_S).result(_TIMEOUT_S)
        groups = sorted(
            g.group_id
            for g in listed.valid
            if self.flow.groups.fullmatch(g.group_id) and not self.flow.groups_exclude.fullmatch(g.group_id)
        )
        checkpoints = []
        for group in groups:
            future = source_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
            try:
                committed = future.result(_TIMEOUT_S).topic_partitions
            except (KafkaException, TimeoutError) as exc:
                log.warning("%s: offsets of group %s: %s", self.flow.name, group, exc)
                continue
            for tp in committed:
                if tp.topic not in remote_topics or tp.offset < 0 or tp.error is not None:
                    continue
                translated = translator.translate(tp.topic, tp.partition, tp.offset)
                if translated is not None:
                    checkpoints.append(
                        Checkpoint(group, remote_topics[tp.topic], tp.partition, tp.offset, translated, tp.metadata or "")
                    )
        return checkpoints

    def emit(self, producer, checkpoints: list[Checkpoint]) -> None:
        """Into `<source>.checkpoints.internal` on the target, in a transaction of the flow's producer."""
        if not checkpoints:
            return
        producer.begin_transaction()
        for checkpoint in checkpoints:
            key, value = encode_checkpoint(checkpoint)
            producer.produce(self.checkpoints_topic, value=value, key=key, partition=0)
        producer.commit_transaction(_TIMEOUT_S)

    def sync(self, target_admin: AdminClient, checkpoints: list[Checkpoint]) -> None:
        """Commit the translated offsets for each group that no consumer uses on the target, where
        they are ahead of what the group has there (MirrorCheckpointTask.syncGroupOffset)."""
        by_group: dict[str, list[Checkpoint]] = defaultdict(list)
        for checkpoint in checkpoints:
            by_group[checkpoint.group].append(checkpoint)
        for group, group_checkpoints in sorted(by_group.items()):
            try:
                state = target_admin.describe_consumer_groups([group])[group].result(_TIMEOUT_S).state
                if state not in _TARGET_IDLE:
                    log.debug("%s: group %s is %s on the target: not synced", self.flow.name, group, state)
                    continue
                present = target_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
                current = {(tp.topic, tp.partition): tp.offset for tp in present.result(_TIMEOUT_S).topic_partitions}
                ahead = [
                    TopicPartition(c.topic, c.partition, c.downstream_offset, metadata=c.metadata)
                    for c in group_checkpoints
                    if current.get((c.topic, c.partition), -1) < c.downstream_offset
                ]
                if ahead:
                    future = target_admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, ahead)])[group]
                    future.result(_TIMEOUT_S)
                    log.info("%s: group %s synced on %d partitions", self.flow.name, group, len(ahead))
            except (KafkaException, TimeoutError) as exc:
                log.warning("%s: syncing group %s: %s", self.flow.name, group, exc)
