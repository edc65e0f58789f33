"""The standalone broker's record of its cluster: cluster id and topics (name, id, partition
count, config overrides).

File: logway-metadata.json in every online log dir, holding a generation number that grows with
each change. Written to a temporary name, fsynced and renamed over the old copy, one write at a
time in the order of the changes; at start the readable copy with the highest generation wins,
so losing one disk of a JBOD loses no topic. (With ZooKeeper, the cluster's metadata lives there
instead.)

Thread-safety: the event loop owns the in-memory state; writes run on a single worker thread, each
carrying a snapshot taken on the loop, so they land in order.
"""

import asyncio
import base64
import concurrent.futures
import json
import logging
import os
import uuid
from dataclasses import dataclass, field

from storage.durable_file import replace_durably

log = logging.getLogger(__name__)

METADATA_FILE = "logway-metadata.json"
_FORMAT_VERSION = 1


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
        self._paths = [os.path.join(d, METADATA_FILE) for d in log_dirs]
        self.cluster_id = ""
        self.topics: dict[str, TopicInfo] = {}
        self._generation = 0
        self._writer = concurrent.futures.ThreadPoolExecutor(1, "logway-metadata")

    def load(self) -> None:
        """Read the newest copy (blocking: call before serving). A fresh store gets a cluster id."""
        newest = None
        for path in self._paths:
            document = _read(path)
            if document and (newest is None or document["generation"] > newest["generation"]):
                newest = document
        if newest is None:
            self.cluster_id = new_cluster_id()
            return
        self.cluster_id = newest["cluster_id"]
        self._generation = newest["generation"]
        self.topics = {
            name: TopicInfo(name, uuid.UUID(t["topic_id"]), t["partitions"], dict(t["configs"]))
            for name, t in newest["topics"].items()
        }

    async def save(self) -> None:
        """Persist the current state in every log dir that can take it."""
        self._generation += 1
        document = self._snapshot()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._write_everywhere, document)

    def _snapshot(self) -> dict:
        return {
            "version": _FORMAT_VERSION,
            "generation": self._generation,
            "cluster_id": self.cluster_id,
            "topics": {
                t.name: {"topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            },
        }

    def _write_everywhere(self, document: dict) -> None:
        written = 0
        for path in self._paths:
            try:
                _write(path, document)
                written += 1
            except OSError as exc:
                log.error("cannot write %s: %s", path, exc)
        if not written:
            raise OSError("no log directory could store the cluster metadata")

    def close(self) -> None:
        self._writer.shutdown(wait=True)


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return None
    if document.get("version") != _FORMAT_VERSION:
        log.warning("ignoring %s: unknown format version %r", path, document.get("version"))
        return None
    return document


def _write(path: str, document: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    replace_durably(path, json.dumps(document, indent=1, sort_keys=True).encode())
