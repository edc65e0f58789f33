"""A small JSON document kept under one file name in every log dir: a standalone broker's
topics (broker/topic_store.py), ACLs, client quotas and SCRAM users (broker/security/),
dynamic broker configs (broker/dynamic_config.py); `EntityConfigs` is such a document of
configs by entity name.

Format: a JSON object {"version": V, "generation": G, ...the owner's fields}. Each save writes the
next generation to every log dir that can take it (storage.durable_file: a temporary name,
fsync, rename over the old copy); at load the readable copy of version V with the highest
generation wins, so losing one disk of a JBOD loses nothing written. Unreadable copies and
copies of another version are logged and skipped.

Thread-safety: blocking file I/O, run from one thread at a time (a worker thread, or before the
broker serves); the generation belongs to whoever saves.
"""

import asyncio
import concurrent.futures
import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from protocol.errors import ErrorCode, KafkaError
from storage.durable_file import replace_durably

log = logging.getLogger(__name__)


class MirroredDocument:
    def __init__(self, log_dirs: Sequence[str], file_name: str, what: str, version: int = 1) -> None:
        """`what` names the content in errors ("the ACLs")."""
        self.paths = [os.path.join(d, file_name) for d in log_dirs]
        self.version = version
        self.generation = 0
        self._what = what

    def load(self) -> dict[str, Any] | None:
        """The newest readable copy (None when there is none); later saves follow its generation."""
        newest = None
        for path in self.paths:
            document = self._read(path)
            if document is not None and (newest is None or document["generation"] > newest["generation"]):
                newest = document
        if newest is not None:
            self.generation = newest["generation"]
        return newest

    def save(self, fields: Mapping[str, Any]) -> None:
        """Write `fields` as the next generation in every log dir that can take it; OSError when
        none could (the generation then stays, for the next save to use)."""
        generation = self.generation + 1
        document = {**fields, "version": self.version, "generation": generation}
        data = json.dumps(document, indent=1, sort_keys=True).encode()
        written = 0
        for path in self.paths:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                replace_durably(path, data)
                written += 1
            except OSError as exc:
                log.error("cannot write %s to %s: %s", self._what, path, exc)
        if not written:
            raise OSError(f"no log directory could store {self._what}")
        self.generation = generation

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", path, exc)
            return None
        if not isinstance(document, dict) or document.get("version") != self.version:
            log.warning("ignoring %s: not a version %d document", path, self.version)
            return None
        if not isinstance(document.get("generation"), int):
            log.warning("ignoring %s: no generation", path)
            return None
        return document


class EntityConfigs:
    """Configs of named entities, {name: {key: value}}, in a MirroredDocument: what a standalone
    broker keeps where Kafka keeps /config/<type>/<name> in ZooKeeper (client quotas, dynamic
    broker configs). The document is {"entities": {name: config}}.

    Thread-safety: used on the event loop; the file I/O runs on one worker thread of its own,
    so the writes land in order."""

    def __init__(self, log_dirs: Sequence[str], file_name: str, what: str) -> None:
        self._file = MirroredDocument(log_dirs, file_name, what)
        self._entities: dict[str, dict[str, str]] = {}
        self._writer = concurrent.futures.ThreadPoolExecutor(1, f"logway-{file_name}")

    async def load(self) -> dict[str, dict[str, str]]:
        """Every entity's config, from the newest readable copy."""
        newest = await asyncio.get_running_loop().run_in_executor(self._writer, self._file.load)
        if newest is not None:
            self._entities = {name: dict(config) for name, config in newest["entities"].items()}
        return {name: dict(config) for name, config in self._entities.items()}

    def get(self, name: str) -> dict[str, str]:
        return dict(self._entities.get(name, {}))

    async def write(self, name: str, config: Mapping[str, str]) -> None:
        """Make `config` the entity's (an empty one removes it); KAFKA_STORAGE_ERROR when no
        log dir could take it, and then nothing changed."""
        entities = {**self._entities, name: dict(config)}
        if not config:
            del entities[name]
        try:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._file.save, {"entities": entities})
        except OSError as exc:
            raise KafkaError(str(exc), ErrorCode.kafka_storage_error) from exc
        self._entities = entities

    def close(self) -> None:
        self._writer.shutdown(wait=True)
