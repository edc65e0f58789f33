"""InternalTopic in cluster mode, against a fake TopicManager and ReplicaManager: the topic is
ready once it reaches this broker's metadata, whoever created it (brokers racing to create it
converge); a partition this broker comes to lead is served once loaded and committed."""

import asyncio
from types import SimpleNamespace

from coordinator.internal_topic import InternalTopic, LoadState, partition_for
from protocol.errors import ErrorCode, KafkaError
from storage.topic_partition import TopicPartition

PARTITIONS = 5


class ClusterTopics:
    """A cluster-mode TopicManager: `create` fails with `create_error` (after letting a rival
    creation land in `topics`), `wait_for_topic` answers `metadata_partitions` or raises (once
    `metadata_arrived` is set, if there is one)."""

    is_local = False
    live_broker_count = 3

    def __init__(self, create_error: ErrorCode | None = None, metadata_partitions: int | None = PARTITIONS) -> None:
        self.topics: dict = {}
        self.create_error = create_error
        self.metadata_partitions = metadata_partitions
        self.created: list[tuple[str, int, int]] = []
        self.waited_for: list[str] = []
        self.metadata_arrived: asyncio.Event | None = None  # wait_for_topic waits for it when set

    def check_new_topic(self, *args, **kwargs) -> None:
        pass

    async def create(self, name, count, configs, replication_factor) -> None:
        if self.create_error is not None:
            raise KafkaError(f"{name}: {self.create_error.name}", self.create_error)
        self.created.append((name, count, replication_factor))

    async def wait_for_topic(self, name: str) -> int:
        self.waited_for.append(name)
        if self.metadata_arrived is not None:
            await self.metadata_arrived.wait()
        if self.metadata_partitions is None:
            raise KafkaError("not in the metadata in time", ErrorCode.request_timed_out)
        return self.metadata_partitions


class LeaderReplicas:
    """A ReplicaManager leading every partition, each with a log ending at `log_end_offset` and
    a HW at `high_watermark`; `wait_for_commit` raises the errors of `commit_errors` in turn,
    then returns once `committed` is set."""

    def __init__(self, log_end_offset: int, high_watermark: int, commit_errors: tuple[ErrorCode, ...] = ()) -> None:
        self.log = SimpleNamespace(log_start_offset=0, log_end_offset=log_end_offset, high_watermark=high_watermark,
                                   slice=lambda start, end: _Slice())
        self.commit_errors = list(commit_errors)
        self.committed = asyncio.Event()
        self.waited_for: list[int] = []

    def leads(self, tp: TopicPartition) -> bool:
        return True

    def get_partition(self, tp: TopicPartition) -> SimpleNamespace:
        return SimpleNamespace(log=self.log, leader_epoch=1)

    async def wait_for_commit(self, tp: TopicPartition, last_offset: int, timeout_s: float) -> None:
        self.waited_for.append(last_offset)
        if self.commit_errors:
            error = self.commit_errors.pop(0)
            raise KafkaError(f"{tp}: {error.name}", error)
        await self.committed.wait()


class _Slice:
    def __enter__(self) -> "_Slice":
        return self

    def __exit__(self, *exc_info) -> None:
        pass


def _internal_topic(topics: ClusterTopics, replicas: LeaderReplicas | None = None,
                    installed: list | None = None) -> InternalTopic:
    return InternalTopic(
        "__consumer_offsets", topics, replica_manager=replicas, partition_count=PARTITIONS, replication_factor=3,
        configs={"min.insync.replicas": "2"}, load_buffer_bytes=1024, read=lambda log_slice, size: "contents",
        install=lambda partition, contents: (installed if installed is not None else []).append(partition),
    )


def _leading(replicas: LeaderReplicas, installed: list, partition: int = 2) -> InternalTopic:
    """An InternalTopic told that this broker now leads `partition`: its load starts."""
    topic = _internal_topic(ClusterTopics(), replicas, installed)
    topic.on_become_leader(TopicPartition("__consumer_offsets", partition))
    return topic


async def _until(condition, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within the time")


def _ensure(topic: InternalTopic, times: int = 1) -> list[bool]:
    async def main():
        return await asyncio.gather(*(topic.ensure() for _ in range(times)))

    return asyncio.run(main())


def test_the_broker_that_creates_the_topic_serves_it():
    topics = ClusterTopics()
    topic = _internal_topic(topics)
    assert _ensure(topic, times=3) == [True] * 3
    assert topics.created == [("__consumer_offsets", PARTITIONS, 3)]  # one creation for concurrent requests
    assert topic.partition_count == PARTITIONS


def test_a_broker_losing_the_race_to_create_the_topic_serves_the_winners():
    topics = ClusterTopics(create_error=ErrorCode.topic_already_exists, metadata_partitions=PARTITIONS)
    topic = _internal_topic(topics)
    assert _ensure(topic) == [True]
    assert topics.waited_for == ["__consumer_offsets"]
    assert topic.partition_count == PARTITIONS
    assert topic.state_of("group") is ErrorCode.not_coordinator  # it leads no partition of it yet
    assert topic.partition_for("group") == partition_for("group", PARTITIONS)


def test_a_topic_known_from_zookeeper_is_served_once_in_the_metadata():
    topics = ClusterTopics()
    topics.topics["__consumer_offsets"] = object()
    topic = _internal_topic(topics)
    assert _ensure(topic) == [True]
    assert topics.created == [] and topics.waited_for == ["__consumer_offsets"]


def test_a_topic_that_never_reaches_the_metadata_is_not_ready_and_is_waited_for_again():
    topics = ClusterTopics(create_error=ErrorCode.topic_already_exists, metadata_partitions=None)
    topic = _internal_topic(topics)
    assert _ensure(topic) == [False]
    assert topic.partition_count is None
    topics.metadata_partitions = PARTITIONS
    assert _ensure(topic) == [True]


def test_other_creation_errors_leave_the_topic_not_ready():
    topics = ClusterTopics(create_error=ErrorCode.invalid_replication_factor)
    topic = _internal_topic(topics)
    assert _ensure(topic) == [False]
    assert topics.waited_for == [] and topic.partition_count is None


def test_leading_a_partition_before_the_topic_reaches_the_metadata_does_not_make_it_ready():
    """LeaderAndIsr comes before the UpdateMetadata naming the topic's leaders: a FindCoordinator
    in between must wait for the metadata, not find no leader there (COORDINATOR_NOT_AVAILABLE,
    seen with brokers racing to create the topic)."""
    topics = ClusterTopics()
    topics.topics["__consumer_offsets"] = SimpleNamespace(partitions=PARTITIONS)
    topic = _internal_topic(topics)

    async def main():
        arrived = topics.metadata_arrived = asyncio.Event()
        topic.on_become_leader(TopicPartition("__consumer_offsets", 0))
        topic.stop()  # the partition's load is not what this is about
        assert topic.partition_count == PARTITIONS
        ensured = asyncio.ensure_future(topic.ensure())
        await asyncio.sleep(0.01)
        assert not ensured.done()
        arrived.set()
        assert await ensured

    asyncio.run(main())


def test_a_new_leader_serves_what_it_loaded_once_the_high_watermark_reaches_it():
    """Its log may end with records its predecessor appended but never saw committed: a leader
    change before they are replicated would take them away, and a transaction coordinator that
    had sent a loaded PrepareCommit's markers would leave the transaction committed in some
    partitions and aborted in the others (Jepsen seed 849222921)."""
    installed = []

    async def main():
        replicas = LeaderReplicas(log_end_offset=10, high_watermark=7)
        topic = _leading(replicas, installed)
        await _until(lambda: replicas.waited_for)
        await asyncio.sleep(0.05)
        assert replicas.waited_for == [9]
        assert installed == [] and topic.partitions[2] is LoadState.LOADING
        replicas.committed.set()
        await _until(lambda: installed)
        assert topic.partitions[2] is LoadState.LOADED

    asyncio.run(main())


def test_the_partitions_led_before_the_coordinator_started_are_loaded_when_it_starts():
    """A broker restarting as a partition's leader handles the controller's LeaderAndIsr while
    it joins the cluster, before its coordinators start: no one heard that it leads, and its
    clients were told NOT_COORDINATOR for good (Jepsen seed 3020630659)."""
    installed = []

    async def main():
        topics = ClusterTopics()
        topics.topics["__consumer_offsets"] = SimpleNamespace(partitions=PARTITIONS)
        replicas = LeaderReplicas(log_end_offset=10, high_watermark=10)  # leads every partition
        topic = _internal_topic(topics, replicas, installed)
        topic.start()
        await _until(lambda: len(installed) == PARTITIONS)
        assert sorted(installed) == list(range(PARTITIONS))
        assert all(topic.partitions[p] is LoadState.LOADED for p in range(PARTITIONS))

    asyncio.run(main())


def test_a_new_leader_whose_high_watermark_is_at_its_log_end_serves_at_once():
    installed = []

    async def main():
        replicas = LeaderReplicas(log_end_offset=10, high_watermark=10)
        topic = _leading(replicas, installed)
        await _until(lambda: installed)
        assert replicas.waited_for == [] and topic.partitions[2] is LoadState.LOADED

    asyncio.run(main())


def test_the_wait_for_the_high_watermark_outlasts_timeouts_and_ends_once_it_is_there_with_a_small_isr():
    """REQUEST_TIMED_OUT waits again; NOT_ENOUGH_REPLICAS_AFTER_APPEND means the HW passed
    (the ISR under min.insync.replicas concerns the writes to come, which fail on their own)."""
    installed = []

    async def main():
        errors = (ErrorCode.request_timed_out, ErrorCode.not_leader_or_follower,
                  ErrorCode.not_enough_replicas_after_append)
        replicas = LeaderReplicas(log_end_offset=10, high_watermark=0, commit_errors=errors)
        topic = _leading(replicas, installed)
        await _until(lambda: installed)
        assert replicas.waited_for == [9, 9, 9] and topic.partitions[2] is LoadState.LOADED

    asyncio.run(main())


def test_resigning_while_waiting_for_the_high_watermark_installs_nothing():
    installed = []

    async def main():
        replicas = LeaderReplicas(log_end_offset=10, high_watermark=7)
        topic = _leading(replicas, installed)
        await _until(lambda: replicas.waited_for)
        assert topic.on_resign(TopicPartition("__consumer_offsets", 2))
        replicas.committed.set()
        await asyncio.sleep(0.05)
        assert installed == [] and 2 not in topic.partitions

    asyncio.run(main())
