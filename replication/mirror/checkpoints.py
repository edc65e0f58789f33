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

Pairs are kept per incarnation (records.Incarnation: the source and target topic ids): a pair
of a new incarnation drops those of the old one, and a group offset is translated only through
pairs of the incarnation the flow copies now, never through those of a topic deleted since (its
offsets mean nothing for the new one). `resume_offset` applies the same rule to where the flow
resumes a source partition.

The flow's thread runs this between its transactions (flow.MirrorFlow), with the flow's own
transactional producer, so nothing here is shared between threads.
"""

import bisect
import logging
from collections import defaultdict

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from replication.mirror.config import FlowConfig
from replication.mirror.records import Checkpoint, Incarnation, OffsetPair, encode_checkpoint

log = logging.getLogger(__name__)

PAIRS_KEPT = 1024  # per partition: the newest pairs, for groups that lag behind the mirror
_TIMEOUT_S = 30
_TARGET_IDLE = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN}


def same_incarnation(pair: OffsetPair, incarnation: Incarnation) -> bool:
    """Whether the pair is about these topics. A pair without ids (written before pairs carried
    them) is taken to be about the topics there are now, as it was before."""
    return pair.incarnation is None or pair.incarnation == incarnation


def resume_offset(pair: OffsetPair | None, incarnation: Incarnation) -> int | None:
    """Where to resume copying a source partition whose last committed pair is `pair` into the
    target topic, both topics being `incarnation` now: the pair's source offset, or None (from
    the beginning) when there is no pair or it is about a topic since deleted, on either side. A
    new source topic is copied whole after the old one's records in the target topic; a new
    target topic gets the whole source."""
    if pair is None or not same_incarnation(pair, incarnation):
        return None
    return pair.source_offset


class OffsetTranslator:
    def __init__(self, kept: int = PAIRS_KEPT) -> None:
        self.kept = kept
        self._source: dict[tuple[str, int], list[int]] = defaultdict(list)
        self._target: dict[tuple[str, int], list[int]] = defaultdict(list)
        self._incarnation: dict[tuple[str, int], Incarnation | None] = {}

    def add(self, pair: OffsetPair) -> None:
        """Pairs come in the order they were committed, so a pair of another incarnation than
        the partition's previous one is of a newer incarnation: it replaces them all."""
        key = (pair.topic, pair.partition)
        known = self._incarnation.get(key)
        if pair.incarnation is not None and known is not None and pair.incarnation != known:
            self._source[key].clear()
            self._target[key].clear()
        if pair.incarnation is not None or key not in self._incarnation:
            self._incarnation[key] = pair.incarnation
        sources, targets = self._source[key], self._target[key]
        if sources and pair.source_offset <= sources[-1]:
            return  # a pair read back from the topic that an older one follows: keep them ordered
        sources.append(pair.source_offset)
        targets.append(pair.target_offset)
        if len(sources) > self.kept:
            del sources[0], targets[0]

    def translate(self, topic: str, partition: int, source_offset: int, incarnation: Incarnation) -> int | None:
        """The target offset for a group at `source_offset` of the source partition, both
        topics being `incarnation` now; None when no pair of theirs is at or before it."""
        key = (topic, partition)
        sources = self._source.get(key)
        if not sources:
            return None
        known = self._incarnation[key]
        if known is not None and known != incarnation:
            return None
        index = bisect.bisect_right(sources, source_offset) - 1
        return None if index < 0 else self._target[key][index]


class GroupOffsets:
    """One round of checkpoints for the flow's groups, and optionally their sync on the target."""

    def __init__(self, flow: FlowConfig, checkpoints_topic: str) -> None:
        self.flow = flow
        self.checkpoints_topic = checkpoints_topic

    def checkpoints(
        self, source_admin: AdminClient, remote_topics: dict[str, tuple[str, Incarnation]], translator: OffsetTranslator
    ) -> list[Checkpoint]:
        """Each selected source group's committed offsets on mirrored topics, translated.
        `remote_topics`: source topic -> target topic and the incarnation the flow copies. The
        caller checks afterwards that the topics are still those (flow.MirrorFlow), so that an
        offset read here cannot be of a topic created since."""
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
                remote, incarnation = remote_topics[tp.topic]
                translated = translator.translate(tp.topic, tp.partition, tp.offset, incarnation)
                if translated is not None:
                    checkpoints.append(Checkpoint(group, remote, tp.partition, tp.offset, translated, tp.metadata or ""))
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
