"""One mirroring flow (source -> target), exactly once.

The flow reads the selected source topics (read_committed: aborted source transactions are not
copied) with an assigned consumer, and copies each source partition to the same partition of
`<source alias>.<topic>` on the target with a transactional producer. Each transaction holds one
batch of copied records and, for every partition in the batch, the pair (next source offset, next
target offset), written to the compacted topic `mm2-offsets.<source>.internal` on the target
after the pair of the batch's first record. The pairs are therefore checkpointed at every
transaction commit, and a committed pair always describes exactly the records committed with it.

At start (and after any error), the flow calls init_transactions with its fixed transactional.id
(`logway-mirror.<source>-><target>`), which aborts whatever a previous instance left open and
fences that instance if it is still alive; it then reads the pairs topic to its end with
read_committed and resumes each source partition at its last committed pair's source offset
(the beginning for a partition with no pair). So a mirror killed at any point and restarted
copies every source record once: records of an aborted transaction are invisible to
read_committed readers and are copied again.

Topics deleted and created again under their names: each pair carries the ids of the source
topic and of the target topic it is about (records.Incarnation), committed in the same
transaction. A partition whose last pair is about another source topic (the source topic was
recreated) or another target topic (the target topic was recreated) is copied from the source's
beginning (checkpoints.resume_offset): a new source topic goes into the existing target topic
after the old one's records, a new target topic gets the whole source. Before committing a
transaction the flow checks that the topics of its records still have the ids it copies (one
Metadata request to each cluster, answered while the pairs are sent): the source records were
fetched from them and the target records written to them, so the pairs name the topics they
describe. When a topic of the flow was deleted or recreated on either side (there, or at a
topic refresh), the flow starts over from the committed pairs, which sorts out where each
partition resumes.

Topics: every refresh.topics.interval.seconds the flow lists the source's topics, selects them
with policy.ReplicationPolicy.should_replicate, creates missing target topics with the source's
partition count and its non-default configs (less MirrorMaker 2's DefaultConfigPropertyFilter
exclusions), adds target partitions when the source grew, and assigns new source partitions.
Every sync.topic.configs.interval.seconds it sets on each target topic the source's non-default
configs that differ, and deletes the target's values of those the source has at their default.

Groups (checkpoints.py): every emit.checkpoints.interval.seconds the flow translates the source
groups' committed offsets through the pairs and writes them as checkpoints to
`<source>.checkpoints.internal` on the target; every sync.group.offsets.interval.seconds (when
sync.group.offsets.enabled) it commits them for the same groups on the target.

The client is librdkafka (confluent-kafka): see docs/mirroring.md for why.
"""

import logging
import threading
import time
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from replication.mirror.checkpoints import GroupOffsets, OffsetTranslator, resume_offset
from replication.mirror.config import FlowConfig, compile_pattern_list
from replication.mirror.policy import ReplicationPolicy
from replication.mirror.records import (
    Incarnation,
    OffsetPair,
    RecordFormatError,
    decode_pair,
    encode_pair,
    topic_id_text,
)

log = logging.getLogger(__name__)

# DefaultConfigPropertyFilter.CONFIG_PROPERTIES_EXCLUDE_DEFAULT (Kafka 3.9)
CONFIG_PROPERTIES_EXCLUDE = compile_pattern_list(
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, min\.insync\.replicas",
    "config.properties.exclude",
)
BATCH_RECORDS = 2000  # records copied per transaction at most
POLL_TIMEOUT_S = 0.2
ADMIN_TIMEOUT_S = 30
RETRY_BACKOFF_S = 1.0


# Another producer with the flow's transactional.id has taken over: starting over would fence it
# in turn, so the flow stops instead.
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class FlowStopped(Exception):
    """The flow was fenced by another instance of itself: it must not go on."""


class TopicsChanged(Exception):
    """A topic the flow copies was deleted or recreated on either side: the flow starts over
    from the committed pairs, whose topic ids say where each partition resumes."""


@dataclass
class _Assigned:
    remote_topic: str
    partitions: int
    incarnation: Incarnation


@dataclass(frozen=True)
class _Described:
    topic_id: bytes
    partitions: int


def describe_topics(admin: AdminClient, topics) -> dict:
    """Futures of the topics' ids and partition counts, in one Metadata request; see `described`."""
    topics = sorted(set(topics))
    return admin.describe_topics(TopicCollection(topics)) if topics else {}


def described(futures: dict) -> dict[str, _Described]:
    """The answers to `describe_topics`, leaving out the topics that do not exist."""
    result = {}
    for name, future in futures.items():
        try:
            description = future.result(ADMIN_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise
        uuid = description.topic_id
        topic_id = uuid.get_most_significant_bits().to_bytes(8, "big", signed=True) + uuid.get_least_significant_bits().to_bytes(
            8, "big", signed=True
        )
        result[name] = _Described(topic_id, len(description.partitions))
    return result


def create_topic_if_missing(admin: AdminClient, topic: NewTopic) -> bool:
    """Create the topic; False when it exists already."""
    try:
        admin.create_topics([topic])[topic.topic].result(ADMIN_TIMEOUT_S)
        return True
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise


def transactional_id(flow: FlowConfig) -> str:
    return f"logway-mirror.{flow.name}"


class MirrorFlow:
    def __init__(self, flow: FlowConfig, policy: ReplicationPolicy, stop: threading.Event) -> None:
        self.flow = flow
        self.policy = policy
        self.stop = stop
        self.offsets_topic = policy.offsets_topic(flow.source.alias)
        self.group_offsets = GroupOffsets(flow, policy.checkpoints_topic(flow.source.alias))
        self.copied = 0  # records committed on the target by this process (for logs and tests)

    def run(self) -> None:
        """Copy until `stop` is set; after an error, start over from the committed pairs."""
        while not self.stop.is_set():
            try:
                self._run_once()
            except FlowStopped:
                raise
            except TopicsChanged as exc:
                log.warning("%s: %s; starting over from the committed pairs", self.flow.name, exc)
            except (KafkaException, TimeoutError) as exc:  # TimeoutError: an admin future not answered
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() in _FENCED:
                    raise FlowStopped(f"{self.flow.name}: fenced by another instance") from exc
                log.warning("%s: %s; starting over from the committed pairs", self.flow.name, str(exc) or repr(exc))
                self.stop.wait(RETRY_BACKOFF_S)

    # ---------------------------------------------------------------------------------------

    def _run_once(self) -> None:
        flow = self.flow
        source_admin = AdminClient(flow.source.client)
        target_admin = AdminClient(flow.target.client)
        self._ensure_topic(target_admin, self.offsets_topic, 1, {"cleanup.policy": "compact"})
        if flow.emit_checkpoints:
            self._ensure_topic(target_admin, self.group_offsets.checkpoints_topic, 1, {"cleanup.policy": "compact"})
        producer = Producer(
            {
                **flow.target.client,
                "transactional.id": transactional_id(flow),
                "linger.ms": 5,
                # a deleted target topic is created again by the flow, with the source's
                # partitions and configs, not by the broker with its defaults
                "allow.auto.create.topics": False,
                "client.id": f"logway-mirror-{flow.name}-producer",
            }
        )
        consumer = Consumer(
            {
                **flow.source.client,
                "group.id": f"logway-mirror.{flow.name}",  # librdkafka wants one; never joined nor committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "client.id": f"logway-mirror-{flow.name}-consumer",
            }
        )
        try:
            producer.init_transactions(ADMIN_TIMEOUT_S)
            translator = OffsetTranslator()
            pairs = self._read_pairs(translator)
            assigned: dict[str, _Assigned] = {}
            self._refresh_topics(source_admin, target_admin, producer, consumer, pairs, assigned)
            self._sync_configs(source_admin, target_admin, assigned)
            now = time.monotonic()
            next_refresh = now + flow.refresh_topics_interval_s
            next_config_sync = now + flow.sync_topic_configs_interval_s
            next_checkpoints = now + flow.emit_checkpoints_interval_s
            next_group_sync = now + flow.sync_group_offsets_interval_s
            while not self.stop.is_set():
                # Wait for one record only, then take what has arrived: a transaction starts as
                # soon as there is something to copy, and grows while the previous one commits.
                messages = consumer.consume(1, POLL_TIMEOUT_S)
                if messages:
                    messages += consumer.consume(BATCH_RECORDS - 1, 0)
                records = [m for m in messages if m.error() is None]
                for message in messages:
                    if message.error() is not None:
                        log.warning("%s: source fetch: %s", flow.name, message.error())
                if records:
                    self._copy(producer, source_admin, target_admin, records, assigned, translator)
                now = time.monotonic()
                if flow.refresh_topics and now >= next_refresh:
                    self._refresh_topics(source_admin, target_admin, producer, consumer, pairs, assigned)
                    next_refresh = now + flow.refresh_topics_interval_s
                if flow.sync_topic_configs and now >= next_config_sync:
                    self._sync_configs(source_admin, target_admin, assigned)
                    next_config_sync = now + flow.sync_topic_configs_interval_s
                emit = flow.emit_checkpoints and now >= next_checkpoints
                sync = flow.sync_group_offsets and now >= next_group_sync
                if emit or sync:
                    remote_topics = {topic: (known.remote_topic, known.incarnation) for topic, known in assigned.items()}
                    checkpoints = self.group_offsets.checkpoints(source_admin, remote_topics, translator)
                    # the groups' offsets were read from the topics the pairs describe
                    self._check_topics(source_admin, target_admin, assigned, set(assigned))
                    if emit:
                        self.group_offsets.emit(producer, checkpoints)
                        next_checkpoints = now + flow.emit_checkpoints_interval_s
                    if sync:
                        self.group_offsets.sync(target_admin, checkpoints)
                        next_group_sync = now + flow.sync_group_offsets_interval_s
        finally:
            consumer.close()
            producer.flush(1)

    def _copy(
        self,
        producer: Producer,
        source_admin: AdminClient,
        target_admin: AdminClient,
        records: list,
        assigned: dict[str, _Assigned],
        translator: OffsetTranslator,
    ) -> None:
        """One transaction: the records, then two pairs per partition after them: (first source
        offset copied, its target offset) and (next source offset, next target offset). Only the
        second matters for resuming; the first gives group offset translation an exact point at
        the start of every transaction (checkpoints.py). The pairs name the topics by id; the
        transaction is aborted if either side's topic is no longer the one of those ids."""
        first_target: dict[tuple[str, int], int] = {}
        next_target: dict[tuple[str, int], int] = {}
        first_source: dict[tuple[str, int], int] = {}
        next_source: dict[tuple[str, int], int] = {}
        failures: list[KafkaError] = []

        def delivered(error, message) -> None:
            if error is not None:
                failures.append(error)
                return
            key, offset = (message.topic(), message.partition()), message.offset()
            first_target[key] = min(first_target.get(key, offset), offset)
            next_target[key] = max(next_target.get(key, 0), offset + 1)

        producer.begin_transaction()
        for record in records:
            topic, partition = record.topic(), record.partition()
            _, timestamp = record.timestamp()
            producer.produce(
                assigned[topic].remote_topic,
                value=record.value(),
                key=record.key(),
                partition=partition,
                timestamp=timestamp if timestamp >= 0 else 0,
                headers=record.headers(),
                on_delivery=delivered,
            )
            first_source.setdefault((topic, partition), record.offset())
            next_source[(topic, partition)] = record.offset() + 1
            producer.poll(0)
        # The ids are asked for once the records are fetched (source) and written (target), and
        # the answers awaited while the pairs are sent: the check costs about no round trip.
        topics = {topic for topic, _ in next_source}
        source_ids = describe_topics(source_admin, topics)
        producer.flush(ADMIN_TIMEOUT_S)
        if failures or len(producer) > 0:
            producer.abort_transaction(ADMIN_TIMEOUT_S)
            raise KafkaException(failures[0] if failures else KafkaError(KafkaError._TIMED_OUT))
        target_ids = describe_topics(target_admin, (assigned[topic].remote_topic for topic in topics))
        pairs = []
        for (topic, partition), source_offset in next_source.items():
            known = assigned[topic]
            remote = (known.remote_topic, partition)
            pairs.append(OffsetPair(topic, partition, first_source[(topic, partition)], first_target[remote], known.incarnation))
            pairs.append(OffsetPair(topic, partition, source_offset, next_target[remote], known.incarnation))
        for pair in pairs:
            key, value = encode_pair(pair)
            producer.produce(self.offsets_topic, value=value, key=key, partition=0)
        try:
            self._verify_topics(assigned, topics, source_ids, target_ids)
        except TopicsChanged:
            producer.abort_transaction(ADMIN_TIMEOUT_S)
            raise
        producer.commit_transaction(ADMIN_TIMEOUT_S)
        for pair in pairs:
            translator.add(pair)
        self.copied += len(records)

    def _read_pairs(self, translator: OffsetTranslator) -> dict[tuple[str, int], OffsetPair]:
        """The last committed pair of every source partition, read to the end of the topic; every
        pair read goes to `translator` too."""
        reader = Consumer(
            {
                **self.flow.target.client,
                "group.id": f"logway-mirror.{self.flow.name}.pairs",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "client.id": f"logway-mirror-{self.flow.name}-pairs",
            }
        )
        pairs: dict[tuple[str, int], OffsetPair] = {}
        try:
            reader.assign([TopicPartition(self.offsets_topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + ADMIN_TIMEOUT_S
            while True:
                if time.monotonic() > deadline:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "reading the offset pairs"))
                message = reader.poll(POLL_TIMEOUT_S)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        break
                    raise KafkaException(message.error())
                try:
                    pair = decode_pair(message.key() or b"", message.value() or b"")
                except RecordFormatError:
                    log.warning("%s: skipping a record of %s that is not an offset pair", self.flow.name, self.offsets_topic)
                    continue
                pairs[(pair.topic, pair.partition)] = pair
                translator.add(pair)
        finally:
            reader.close()
        log.info("%s: resuming after %d committed offset pairs", self.flow.name, len(pairs))
        return pairs

    # ---------------------------------------------------------------------------------------
    # topics

    def _selected(self, topics) -> list[str]:
        flow = self.flow
        return sorted(
            t for t in topics if self.policy.should_replicate(t, flow.target.alias, flow.topics, flow.topics_exclude)
        )

    def _check_topics(self, source_admin, target_admin, assigned: dict[str, _Assigned], topics: set[str]) -> None:
        """Raise TopicsChanged unless each of `topics` (assigned source topics) and its target
        topic still have the ids the flow copies."""
        source_ids = describe_topics(source_admin, topics)
        target_ids = describe_topics(target_admin, (assigned[t].remote_topic for t in topics))
        self._verify_topics(assigned, topics, source_ids, target_ids)

    def _verify_topics(self, assigned: dict[str, _Assigned], topics: set[str], source_ids: dict, target_ids: dict) -> None:
        """_check_topics with the `describe_topics` futures of both sides asked for already."""
        sources, targets = described(source_ids), described(target_ids)
        for topic in sorted(topics):
            self._check_assigned(topic, assigned[topic], sources.get(topic), targets.get(assigned[topic].remote_topic))

    def _check_assigned(self, topic: str, known: _Assigned, source: _Described | None, target: _Described | None) -> None:
        source_cluster, target_cluster = self.flow.source.alias, self.flow.target.alias
        if source is None:
            raise TopicsChanged(f"{topic} was deleted on {source_cluster}")
        if source.topic_id != known.incarnation.source_topic_id:
            raise TopicsChanged(f"{topic} was deleted and created again on {source_cluster}")
        if target is None:
            raise TopicsChanged(f"{known.remote_topic} was deleted on {target_cluster}")
        if target.topic_id != known.incarnation.target_topic_id:
            raise TopicsChanged(f"{known.remote_topic} was deleted and created again on {target_cluster}")

    def _refresh_topics(self, source_admin, target_admin, producer, consumer, pairs, assigned) -> None:
        source_topics = source_admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics
        selected = [topic for topic in self._selected(source_topics) if source_topics[topic].error is None]
        remotes = {topic: self.policy.remote_topic(self.flow.source.alias, topic) for topic in selected}
        sources = described(describe_topics(source_admin, set(selected) | set(assigned)))
        targets = described(describe_topics(target_admin, set(remotes.values()) | {k.remote_topic for k in assigned.values()}))
        for topic, known in assigned.items():
            self._check_assigned(topic, known, sources.get(topic), targets.get(known.remote_topic))
        new_partitions: list[TopicPartition] = []
        for topic in selected:
            if topic not in sources:
                continue  # deleted since it was listed
            count, remote = sources[topic].partitions, remotes[topic]
            if remote not in targets:
                configs = self._topic_configs(source_admin, topic)
                self._ensure_topic(target_admin, remote, count, configs)
                targets.update(described(describe_topics(target_admin, [remote])))
                if remote not in targets:
                    raise TopicsChanged(f"{remote} was deleted on {self.flow.target.alias} as it was created")
            elif targets[remote].partitions < count:
                log.info("%s: %s grew to %d partitions; so does %s", self.flow.name, topic, count, remote)
                self._wait(target_admin.create_partitions([NewPartitions(remote, count)]), remote)
            self._wait_for_partitions(producer, remote, count)
            known = assigned.get(topic)
            incarnation = known.incarnation if known else Incarnation(sources[topic].topic_id, targets[remote].topic_id)
            first_new = known.partitions if known else 0
            for partition in range(first_new, count):
                pair = pairs.get((topic, partition))
                offset = resume_offset(pair, incarnation)
                if offset is None and pair is not None:
                    self._log_new_incarnation(topic, partition, remote, pair, incarnation)
                new_partitions.append(TopicPartition(topic, partition, OFFSET_BEGINNING if offset is None else offset))
            assigned[topic] = _Assigned(remote, max(count, first_new), incarnation)
        if new_partitions:
            consumer.incremental_assign(new_partitions)
            log.info("%s: copying %d more partitions", self.flow.name, len(new_partitions))

    def _log_new_incarnation(self, topic: str, partition: int, remote: str, pair: OffsetPair, now: Incarnation) -> None:
        """What an operator reads when a partition's pairs are of a topic deleted since."""
        flow = self.flow
        if pair.incarnation.source_topic_id != now.source_topic_id:
            log.warning(
                "%s: %s [%d] on %s is a new topic (id %s; the pairs are of id %s): copying it from its beginning into %s, "
                "after the records copied from the old one",
                flow.name,
                topic,
                partition,
                flow.source.alias,
                topic_id_text(now.source_topic_id),
                topic_id_text(pair.incarnation.source_topic_id),
                remote,
            )
        else:
            log.warning(
                "%s: %s [%d] on %s is a new topic (id %s; the pairs are of id %s): copying %s into it from the beginning",
                flow.name,
                remote,
                partition,
                flow.target.alias,
                topic_id_text(now.target_topic_id),
                topic_id_text(pair.incarnation.target_topic_id),
                topic,
            )

    def _topic_configs(self, admin: AdminClient, topic: str) -> dict[str, str]:
        """The topic's own (non-default) configs that MirrorMaker 2 copies."""
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        entries = self._wait(admin.describe_configs([resource]), topic)
        return {
            name: entry.value
            for name, entry in entries.items()
            if ConfigSource(entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
            and entry.value is not None
            and not CONFIG_PROPERTIES_EXCLUDE.fullmatch(name)
        }

    def _sync_configs(self, source_admin, target_admin, assigned: dict[str, _Assigned]) -> None:
        for topic, known in assigned.items():
            try:
                wanted = self._topic_configs(source_admin, topic)
                present = self._topic_configs(target_admin, known.remote_topic)
            except (KafkaException, TimeoutError) as exc:
                log.warning("%s: reading the configs of %s: %s", self.flow.name, topic, exc)
                continue
            changed = {name: value for name, value in wanted.items() if present.get(name) != value}
            # back to its default on the source: back to the target's default too (MirrorMaker 2
            # deletes the target's value of a property the source has at its default)
            removed = sorted(name for name in present if name not in wanted)
            if not changed and not removed:
                continue
            operations = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in changed.items()]
            operations += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in removed]
            resource = ConfigResource(ConfigResource.Type.TOPIC, known.remote_topic, incremental_configs=operations)
            log.info("%s: %s takes %s and drops %s, as %s", self.flow.name, known.remote_topic, changed, removed, topic)
            self._wait(target_admin.incremental_alter_configs([resource]), known.remote_topic)

    def _ensure_topic(self, admin: AdminClient, topic: str, partitions: int, configs: dict[str, str]) -> None:
        if create_topic_if_missing(admin, NewTopic(topic, partitions, self.flow.replication_factor, config=configs)):
            log.info("%s: created %s with %d partitions", self.flow.name, topic, partitions)

    def _wait_for_partitions(self, producer: Producer, topic: str, count: int) -> None:
        """Until the producer's metadata knows all `count` partitions of the new or grown topic."""
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            metadata = producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
            if metadata is not None and metadata.error is None and len(metadata.partitions) >= count:
                return
            if time.monotonic() > deadline:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{topic} has not {count} partitions"))
            time.sleep(0.1)

    @staticmethod
    def _wait(futures: dict, name: str):
        return futures[next(iter(futures))].result(ADMIN_TIMEOUT_S)

