"""A small JSON document kept under one file name in every log dir: a standalone broker's
topics (broker/topic_store.py), ACLs, client quotas and SCRAM users (broker/security/).

Format: a JSON object {"version": V, "generation": G, ...the owner's fields}. Each save writes the
next generation to every log dir that can take it (storage.durable_file: a temporary name,
fsync, rename over the old copy); at load the readable copy of version V with the highest
generation wins, so losing one disk of a JBOD loses nothing written. Unreadable copies and
copies of another version are logged and skipped.

Thread-safety: blocking file I/O, run from one thread at a time (a worker thread, or before the
broker serves); the generation belongs to whoever saves.
"""

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

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
