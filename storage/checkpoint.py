"""Kafka's offset checkpoint files (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
cleaner-offset-checkpoint, replication-offset-checkpoint): one per log directory.

Format (text): a version line "0", a line with the entry count, then one "<topic> <partition>
<offset>" line per partition. Written to "<name>.tmp", fsynced and renamed over the old file
(storage.durable_file), so a crash leaves either the old or the new checkpoint, never a mix.
"""

from collections.abc import Mapping

from storage.durable_file import replace_durably
from storage.topic_partition import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # the log cleaner's first dirty offsets
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
_VERSION = 0


class CorruptCheckpointError(ValueError):
    pass


class OffsetCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; empty when the file does not exist yet."""
        try:
            with open(self.path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return {}
        try:
            return self._parse(lines)
        except (ValueError, IndexError) as exc:
            raise CorruptCheckpointError(f"{self.path}: {exc}") from exc

    @staticmethod
    def _parse(lines: list[str]) -> dict[TopicPartition, int]:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"unknown checkpoint version {lines[0]!r}")
        count = int(lines[1])
        entries = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[TopicPartition(topic, int(partition))] = int(offset)
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        return entries

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(_VERSION), str(len(offsets))]
        lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in offsets.items()]
        replace_durably(self.path, ("\n".join(lines) + "\n").encode())
