"""Naming of partitions and of their directories."""

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    @property
    def dir_name(self) -> str:
        """The partition's directory under a log dir, as Kafka names it: <topic>-<partition>."""
        return f"{self.topic}-{self.partition}"

    @classmethod
    def from_dir_name(cls, name: str) -> "TopicPartition | None":
        """The partition a directory holds, or None for anything else (deleted or temp dirs)."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            return None
        return cls(topic, int(partition))

    def __str__(self) -> str:
        return self.dir_name
