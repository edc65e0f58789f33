"""The standalone broker's record of its cluster: cluster id and topics (name, id, partition
count, config overrides).

File: logway-metadata.json in every online log dir (storage/mirrored_document.py: a generation
that grows with each change, written durably, the newest readable copy wins at start, so losing
one disk of a JBOD loses no topic), one write at a time in the order of the changes. (With
ZooKeeper, the cluster's metadata lives there instead.)

Thread-safety: the event loop owns the in-memory state; writes run on a single worker thread, each
carrying a snapshot taken on the loop, so they land in order.
"""

import asyncio
import base64
import concurrent.futures
import uuid
from dataclasses import dataclass, field

from storage.mirrored_document import MirroredDocument

METADATA_FILE = "logway-metadata.json"


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 over a random UUID, like Kafka's cluster ids."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class TopicStore:
    def __init__(self, log_dirs: list[str]) -> None:
        self._file = MirroredDocument(log_dirs, METADATA_FILE, "the cluster metadata")
        self.cluster_id = ""
        self.topics: dict[str, TopicInfo] = {}
        self.loaded_from_disk = False
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "logway-metadata")

    def load(self) -> None:
        """Read the newest copy (blocking: call before serving). A fresh store gets a cluster id."""
        newest = self._file.load()
        if newest is None:
            self.cluster_id = new_cluster_id()
            return
        self.cluster_id = newest["cluster_id"]
        self.loaded_from_disk = True
        self.topics = {
            name: TopicInfo(name, uuid.UUID(t["topic_id"]), t["partitions"], dict(t["configs"]))
            for name, t in newest["topics"].items()
        }

    async def save(self) -> None:
        """Persist the current state in every log dir that can take it."""
        document = self._snapshot()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._file.save, document)

    def _snapshot(self) -> dict:
        return {
            "cluster_id": self.cluster_id,
            "topics": {
                t.name: {"topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            },
        }

    def close(self) -> None:
        self._writer.shutdown(wait=True)

