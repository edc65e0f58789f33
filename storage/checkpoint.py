"""Kafka's offset checkpoint files (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
cleaner-offset-checkpoint, replication-offset-checkpoint): one per log directory. The
leader-epoch-checkpoint of each partition (storage.leader_epoch) shares the format's frame.

Format (text): a version line "0", a line with the entry count, then one "<topic> <partition>
<offset>" line per partition. Written to "<name>.tmp", fsynced and renamed over the old file
(storage.durable_file), so a crash leaves either the old or the new checkpoint, never a mix.
"""

from collections.abc import Callable, Mapping
from typing import TypeVar

from storage.durable_file import replace_durably
from storage.topic_partition import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # the log cleaner's first dirty offsets
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
_VERSION = 0
T = TypeVar("T")


class CorruptCheckpointError(ValueError):
    pass


class OffsetCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        """The checkpointed offsets; empty when the file does not exist yet."""
        entries = read_checkpoint(self.path, _parse_offset)
        return {} if entries is None else dict(entries)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        write_checkpoint(self.path, [f"{tp.topic} {tp.partition} {offset}" for tp, offset in offsets.items()])


def _parse_offset(line: str) -> tuple[TopicPartition, int]:
    topic, partition, offset = line.split(" ")
    return TopicPartition(topic, int(partition)), int(offset)


def read_checkpoint(path: str, parse_entry: Callable[[str], T]) -> list[T] | None:
    """The entries of a checkpoint file in this format (each line read by `parse_entry`);
    None when the file does not exist. Raises CorruptCheckpointError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return parse_checkpoint(text, parse_entry, path)


def parse_checkpoint(text: str, parse_entry: Callable[[str], T], source: str) -> list[T]:
    """The entries of a checkpoint's contents (`source` names it in errors); raises
    CorruptCheckpointError."""
    lines = text.splitlines()
    try:
        if int(lines[0]) != _VERSION:
            raise ValueError(f"unknown checkpoint version {lines[0]!r}")
        count = int(lines[1])
        entries = [parse_entry(line) for line in lines[2 : 2 + count]]
        if len(entries) != count or len(set(_keys(entries))) != count:
            raise ValueError(f"expected {count} entries, found {len(set(_keys(entries)))}")
    except (ValueError, IndexError) as exc:
        raise CorruptCheckpointError(f"{source}: {exc}") from exc
    return entries


def _keys(entries: list) -> list:
    return [entry[0] for entry in entries]


def checkpoint_bytes(entry_lines: list[str]) -> bytes:
    """The contents of a checkpoint file of these entry lines: version, count, the lines."""
    lines = [str(_VERSION), str(len(entry_lines)), *entry_lines]
    return ("\n".join(lines) + "\n").encode()


def write_checkpoint(path: str, entry_lines: list[str]) -> None:
    """Write a checkpoint file of these entry lines, durably (storage.durable_file)."""
    replace_durably(path, checkpoint_bytes(entry_lines))
