"""meta.properties: the broker id that a broker's log dirs belong to (Kafka's
BrokerMetadataCheckpoint), kept in cluster mode.

File: `meta.properties` in every log dir, Java properties as Kafka writes them:

    version=0
    broker.id=<id>

Invariants: every log dir that has the file names the same id (a copy naming another is
Kafka's InconsistentBrokerMetadataException), and a configured `broker.id` matches it (Kafka's
InconsistentBrokerIdException); both stop the start. Written, once the broker's id is known,
to every log dir by `replace_durably` (temporary name, fsync, rename), so a crash leaves the old
file or the new one. An unreadable file is skipped, as Kafka skips an offline log dir.

Thread-safety: plain blocking file I/O; call it off the event loop (or before it serves).
"""

import logging
import os
from collections.abc import Iterable

from storage.durable_file import replace_durably

log = logging.getLogger(__name__)

FILE = "meta.properties"
_VERSION = 0
NO_ID = -1


class BrokerMetadataError(Exception):
    """The log dirs or the configuration disagree on this broker's id: it must not start."""


def read_broker_id(log_dirs: Iterable[str]) -> int:
    """The id stored in the log dirs, NO_ID when none has one."""
    found: dict[str, int] = {}
    for log_dir in log_dirs:
        try:
            with open(os.path.join(log_dir, FILE), encoding="utf-8") as file:
                properties = _parse(file.read())
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            log.error("cannot read %s in %s: %s", FILE, log_dir, exc)
            continue
        if "broker.id" in properties:
            found[log_dir] = _broker_id(properties["broker.id"], log_dir)
    if len(set(found.values())) > 1:
        listed = ", ".join(f"{d} -> broker.id {i}" for d, i in sorted(found.items()))
        raise BrokerMetadataError(
            f"the log dirs belong to different brokers ({listed}): are log dirs shared between "
            "brokers, or was data copied from another one?"
        )
    return next(iter(found.values()), NO_ID)


def write_broker_id(log_dirs: Iterable[str], broker_id: int) -> None:
    data = f"#\nversion={_VERSION}\nbroker.id={broker_id}\n".encode()
    for log_dir in log_dirs:
        try:
            replace_durably(os.path.join(log_dir, FILE), data)
        except OSError as exc:  # the log dir is failing: the log manager takes it offline
            log.error("cannot write %s in %s: %s", FILE, log_dir, exc)


def choose_broker_id(configured: int, stored: int, generation_enabled: bool) -> int | None:
    """Kafka's getOrGenerateBrokerId: the stored id, else the configured one; None when one
    must be generated (neither, and broker.id.generation.enable)."""
    if configured >= 0 and stored >= 0 and configured != stored:
        raise BrokerMetadataError(
            f"broker.id {configured} is configured but the log dirs belong to broker {stored} "
            f"({FILE}): configure {stored} to keep this data, or start on empty log dirs for a "
            "new broker."
        )
    if stored >= 0:
        return stored
    if configured >= 0:
        return configured
    if generation_enabled:
        return None
    raise BrokerMetadataError("broker.id is not set and broker.id.generation.enable is false")


def _parse(text: str) -> dict[str, str]:
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def _broker_id(text: str, log_dir: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BrokerMetadataError(f"{FILE} in {log_dir} has an invalid broker.id {text!r}") from None
