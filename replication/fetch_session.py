"""A follower's side of an incremental fetch session with its leader (KIP-227; Kafka's
FetchSessionHandler).

The first fetch is a full one with session_epoch 0, asking the leader for a session. Once the
answer names one, each fetch sends only the partitions that are new to the session or whose
fetch parameters changed, names those no longer fetched in forgotten_topics_data, and counts the
epoch up; the leader answers only the partitions with something new (records, a moved high
watermark or log start offset, an error, a diverging epoch). A partition left out of an answer
is unchanged.

Back to a full fetch (closing the session the leader may still hold):
- after a session error (FETCH_SESSION_ID_NOT_FOUND: the leader has no such session, evicted or
  restarted; INVALID_FETCH_SESSION_EPOCH: a request or answer was lost) or a failed request,
  whose answer may have moved the leader's epoch on;
- when a partition comes back at a new state (a new leader epoch, say) while still in the
  session, or an answer was not applied to a partition: the leader remembers having sent what
  the follower did not take (a high watermark, say), and would not send it again until it
  changes;
- when the leader answers without a session (none free, or it closed it): every fetch is full.

Not thread-safe: one per fetcher, used from its task on the event loop.
"""

from collections.abc import Hashable
from typing import Final, NamedTuple

from protocol.errors import ErrorCode
from protocol.fetch import INITIAL_EPOCH, FetchPartition, FetchTopic, next_epoch
from storage.topic_partition import TopicPartition

SESSION_ERRORS: Final = (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)
# Wanted(...) runs the NamedTuple's interpreted __new__; tuple.__new__ builds the same tuple
# from C.
_new_tuple: Final = tuple.__new__


class Wanted(NamedTuple):
    """A partition's fetch parameters, and the state it is fetched at (compared by identity)."""

    state: Hashable
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int

    def same_fetch(self, other: "Wanted") -> bool:
        return _fetches(
            self, other.state, other.fetch_offset, other.current_leader_epoch, other.last_fetched_epoch,
            other.log_start_offset, other.partition_max_bytes,
        )


def _fetches(
    wanted: Wanted,
    state: Hashable,
    fetch_offset: int,
    current_leader_epoch: int,
    last_fetched_epoch: int,
    log_start_offset: int,
    partition_max_bytes: int,
) -> bool:
    """Whether `wanted` holds these fetch parameters. Field by field, no tuple built: a round
    compares every partition's; a module function, which compiled code calls natively (a
    NamedTuple's method is called generically)."""
    return (
        wanted.fetch_offset == fetch_offset
        and wanted.state is state
        and wanted.current_leader_epoch == current_leader_epoch
        and wanted.last_fetched_epoch == last_fetched_epoch
        and wanted.log_start_offset == log_start_offset
        and wanted.partition_max_bytes == partition_max_bytes
    )


class SessionRequest(NamedTuple):
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: list[tuple[str, list[int]]]  # (topic, partitions), as protocol.fetch's FetchRequest


class FetchSessionClient:
    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, Wanted] = {}  # what the leader holds for the session

    @property
    def full(self) -> bool:
        """The next request is a full one."""
        return self.epoch == INITIAL_EPOCH

    def wanted(
        self,
        tp: TopicPartition,
        state: Hashable,
        fetch_offset: int,
        current_leader_epoch: int,
        last_fetched_epoch: int,
        log_start_offset: int,
        partition_max_bytes: int,
    ) -> Wanted:
        """`tp`'s fetch parameters for the next request: those the session last sent when they
        are the same (an idle partition's, round after round: no tuple built, and `request`
        finds them unchanged by identity), else new ones."""
        before = self._sent.get(tp)
        if before is not None and _fetches(
            before, state, fetch_offset, current_leader_epoch, last_fetched_epoch, log_start_offset, partition_max_bytes
        ):
            return before
        return _new_tuple(
            Wanted,
            (state, fetch_offset, current_leader_epoch, last_fetched_epoch, log_start_offset, partition_max_bytes),
        )

    def request(self, wanted: dict[TopicPartition, Wanted]) -> SessionRequest:
        """The next fetch's session fields and partitions, for fetching `wanted` (kept: the
        caller hands it over)."""
        sent = self._sent
        changed = []
        sent_still_wanted = 0
        if not self.full:
            for tp, w in wanted.items():
                before = sent.get(tp)
                if before is None:
                    changed.append((tp, w))
                    continue
                sent_still_wanted += 1
                if before is not w and not before.same_fetch(w):
                    if before.state is not w.state:
                        self.start_over()  # a partition back at a new state: see the module's notes
                        break
                    changed.append((tp, w))
        if self.full:
            self._sent = wanted
            return SessionRequest(self.session_id, INITIAL_EPOCH, _topics(wanted.items()), [])
        forgotten: dict[str, list[int]] = {}
        if sent_still_wanted < len(sent):  # else every partition sent is still wanted
            for tp in sent:
                if tp not in wanted:
                    forgotten.setdefault(tp.topic, []).append(tp.partition)
        self._sent = wanted
        return SessionRequest(self.session_id, self.epoch, _topics(changed), list(forgotten.items()))

    def answered(self, error_code: int, session_id: int) -> bool:
        """Take the answer's session fields; False for a session error (its partitions are to
        be ignored, and the next fetch is a full one)."""
        if error_code in SESSION_ERRORS:
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.session_id = 0
            self.start_over()
            return False
        if error_code != ErrorCode.none:
            self.start_over()
            return True
        if session_id == 0:  # no session (none free, or closed): the next fetch is full again
            self.session_id, self.epoch = 0, INITIAL_EPOCH
        elif self.full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def start_over(self) -> None:
        """Make the next fetch a full one, closing the current session (the leader opens a
        new one)."""
        self.epoch = INITIAL_EPOCH


def _topics(partitions) -> list[FetchTopic]:
    topics: dict[str, list[FetchPartition]] = {}
    for tp, wanted in partitions:
        topics.setdefault(tp.topic, []).append(
            FetchPartition(
                tp.partition, wanted.fetch_offset, wanted.partition_max_bytes, wanted.current_leader_epoch,
                wanted.last_fetched_epoch, wanted.log_start_offset,
            )
        )
    return [FetchTopic(topic, ps) for topic, ps in topics.items()]
