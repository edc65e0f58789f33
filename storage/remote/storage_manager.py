"""The remote store (Kafka's RemoteStorageManager), over fsspec: a directory (a local disk or a
shared mount such as NFS: `file:///path`), S3 (`s3://bucket/prefix`, through s3fs), HDFS
(`hdfs://namenode/path`, through pyarrow), or any other fsspec file system.

Layout under the store's URL, one set of files per copied segment, named by its start offset and
its unique segment id (a uuid drawn for each copy, so a retried or concurrent copy of the same
offsets never overwrites a committed one):

    <topic>-<topic id>/<partition>/<start offset, 20 digits>-<segment id>.log
                                                                   .index      offset index
                                                                   .timeindex  time index
                                                                   .txnindex   aborted transactions (may be empty)
                                                                   .snapshot   producer state at the segment's end
                                                                   .leader_epoch_checkpoint

Every call blocks: run them on a thread pool, never on the event loop. The files of one segment
are written by one call; which of them form a readable segment is decided by the remote log
metadata (storage.remote.metadata), never by listing the store, except to find orphans.

Settings (`options`, the broker's rsm.config.* keys without the prefix, e.g. `endpoint_url`,
`key`, `secret` for S3) go to the fsspec file system through `fs_options`: each must name a
parameter of the store's file system class, and is converted to that parameter's type (fsspec
would take an unknown name and ignore it, and a string "false" for a flag as true); none is ever
logged.
"""

import enum
import importlib
import inspect
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError
from storage.remote.metadata import RemoteSegmentMetadata, TopicIdPartition

_COPY_CHUNK_BYTES = 4 * 1024 * 1024


class IndexType(enum.Enum):
    """Kafka's RemoteStorageManager.IndexType, with the suffix of its file in the store."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    TRANSACTION = ".txnindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    LEADER_EPOCH = ".leader_epoch_checkpoint"


LOG_SUFFIX = ".log"
_SUFFIXES = (LOG_SUFFIX, *(index.value for index in IndexType))


@dataclass(frozen=True)
class StoredSegment:
    """What the store holds of one segment id: its start offset (from the names) and its files."""

    start_offset: int
    paths: list[str]


class RemoteStorageError(KafkaError):
    """The store failed (Kafka's RemoteStorageException); the operation may be tried again. A
    fetch it fails answers UNKNOWN_SERVER_ERROR for the partition, as Kafka's does."""

    error_code = ErrorCode.unknown_server_error


@dataclass
class FileRange:
    """An open descriptor and how many bytes to copy from its start."""

    fd: int
    size: int


@dataclass
class SegmentFiles:
    """What a copy reads: the segment's files, opened on the event loop (the loop owns the log;
    the descriptors keep the files readable whatever the loop does to them meanwhile), and the
    leader-epoch checkpoint as of the segment's end, made on the loop. `close` after the copy."""

    log: FileRange
    offset_index: FileRange
    time_index: FileRange
    txn_index: FileRange | None
    producer_snapshot: FileRange | None
    leader_epochs: bytes

    def close(self) -> None:
        for part in (self.log, self.offset_index, self.time_index, self.txn_index, self.producer_snapshot):
            if part is not None:
                os.close(part.fd)


# Options every fsspec file system takes besides its class's parameters (AbstractFileSystem's
# listings cache, fsspec's instance cache), with their types.
_GENERIC_OPTIONS: dict[str, type] = {
    "use_listings_cache": bool, "listings_expiry_time": float, "max_paths": int, "skip_instance_cache": bool,
}


# File systems whose other keyword arguments go on somewhere (the package, then the module and
# class taking them): s3fs's to aiobotocore's session (`profile`).
_FORWARDED: dict[str, tuple[str, str]] = {"s3fs": ("aiobotocore.session", "AioSession")}


def _option_types(url: str) -> dict[str, object] | None:
    """The options the file system of `url` takes, by name, each with its default (a type for
    the generic ones); None for a chained URL (`a::b://...`), whose options fsspec nests."""
    import fsspec  # here and below, not at the top: only a broker with tiered storage loads fsspec

    if "::" in url:
        return None
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    cls = fsspec.get_filesystem_class(protocol)
    found: dict[str, object] = dict(_GENERIC_OPTIONS)
    classes = list(reversed(cls.__mro__))
    if forwarded := _FORWARDED.get(cls.__module__.split(".")[0]):
        module, name = forwarded
        classes.append(getattr(importlib.import_module(module), name))
    for klass in classes:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for name, parameter in inspect.signature(init).parameters.items():
            if name != "self" and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
                found[name] = parameter.default
    return found


def _convert(name: str, value: str, default: object) -> object:
    kind = default if isinstance(default, type) else type(default)
    if kind is bool:
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"{name} must be true or false")
        return lowered == "true"
    if kind in (int, float):
        try:
            return kind(value.strip())
        except ValueError:
            raise ValueError(f"{name} must be a{'n integer' if kind is int else ' number'}") from None
    if kind is dict or (default is None and (name.endswith("_kwargs") or name == "extra_conf")):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"{name} must be a JSON object")
        return parsed
    return value


def fs_options(url: str, options: Mapping[str, str]) -> dict[str, object]:
    """`options` (strings: the broker's rsm.config.* settings, the Spark source's options) as
    the file system of `url` takes them: an option that is no parameter of its class is refused
    (fsspec would take it and ignore it), flags (true/false) and numbers are converted by the
    parameter's default, `*_kwargs` and dict parameters parsed as JSON objects. ValueError names
    the option, never its value (a credential); ImportError when the file system's package is
    missing."""
    known = _option_types(url)
    if known is None:
        return dict(options)
    unknown = sorted(name for name in options if name not in known)
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ValueError(f"unknown option{plural} {', '.join(unknown)} of the store {url.split('://')[0]}://")
    return {name: _convert(name, value, known[name]) for name, value in options.items()}


class FsspecRemoteStorageManager:
    def __init__(self, url: str, options: Mapping[str, str] | None = None) -> None:
        import fsspec

        try:
            self.fs, self.root = fsspec.core.url_to_fs(url, **fs_options(url, options or {}))
        except (ImportError, ValueError) as exc:
            raise RemoteStorageError(f"cannot open the remote store {url}: {exc}") from None
        self.url = url

    # ---------------------------------------------------------------------------- naming

    def partition_dir(self, tip: TopicIdPartition) -> str:
        return f"{self.root.rstrip('/')}/{tip.topic}-{tip.topic_id}/{tip.partition}"

    def _path(self, metadata: RemoteSegmentMetadata, suffix: str) -> str:
        return f"{self.partition_dir(metadata.partition)}/{metadata.start_offset:020d}-{metadata.segment_id}{suffix}"

    # ---------------------------------------------------------------------------- writing

    def copy_log_segment_data(self, metadata: RemoteSegmentMetadata, files: SegmentFiles) -> None:
        """Write the segment's files under its segment id (Kafka's copyLogSegmentData)."""
        self._wrapped(self._copy, metadata, files)

    def _copy(self, metadata: RemoteSegmentMetadata, files: SegmentFiles) -> None:
        self.fs.makedirs(self.partition_dir(metadata.partition), exist_ok=True)
        for suffix, part in (
            (IndexType.OFFSET.value, files.offset_index),
            (IndexType.TIMESTAMP.value, files.time_index),
            (IndexType.TRANSACTION.value, files.txn_index),
            (IndexType.PRODUCER_SNAPSHOT.value, files.producer_snapshot),
            (LOG_SUFFIX, files.log),
        ):
            with self.fs.open(self._path(metadata, suffix), "wb") as out:
                if part is not None:
                    _copy_range(part, out)
        with self.fs.open(self._path(metadata, IndexType.LEADER_EPOCH.value), "wb") as out:
            out.write(files.leader_epochs)

    def delete_log_segment_data(self, metadata: RemoteSegmentMetadata) -> None:
        """Remove the segment's files; those already gone are no matter (a retried delete)."""
        self.delete_files([self._path(metadata, suffix) for suffix in _SUFFIXES])

    def delete_files(self, paths: list[str]) -> None:
        def remove() -> None:
            for path in paths:
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass

        self._wrapped(remove)

    def delete_partition(self, tip: TopicIdPartition) -> None:
        """Remove every file of the partition (its topic was deleted)."""

        def remove() -> None:
            directory = self.partition_dir(tip)
            if self.fs.exists(directory):
                self.fs.rm(directory, recursive=True)
            parent = directory.rsplit("/", 1)[0]
            try:
                if self.fs.exists(parent) and not self.fs.ls(parent):
                    self.fs.rmdir(parent)
            except OSError:
                pass  # another partition's directory appeared meanwhile: it stays

        self._wrapped(remove)

    # ---------------------------------------------------------------------------- reading

    def fetch_log_segment(self, metadata: RemoteSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes [start, end) of the segment's .log (fewer at its end): a range read."""
        path = self._path(metadata, LOG_SUFFIX)
        return self._wrapped(lambda: self.fs.cat_file(path, start=start, end=end))

    def fetch_index(self, metadata: RemoteSegmentMetadata, index: IndexType) -> bytes:
        return self._wrapped(self.fs.cat_file, self._path(metadata, index.value))

    def list_segments(self, tip: TopicIdPartition) -> dict[uuid.UUID, StoredSegment]:
        """The files in the store of each segment id of the partition, with the segment's start
        offset (to find orphans)."""

        def listing() -> dict[uuid.UUID, StoredSegment]:
            directory = self.partition_dir(tip)
            self.fs.invalidate_cache(directory)  # object stores' listings are cached
            if not self.fs.exists(directory):
                return {}
            found: dict[uuid.UUID, StoredSegment] = {}
            for path in self.fs.ls(directory, detail=False):
                named = _parse_name(path.rsplit("/", 1)[-1])
                if named is not None:
                    start_offset, segment_id = named
                    found.setdefault(segment_id, StoredSegment(start_offset, [])).paths.append(path)
            return found

        return self._wrapped(listing)

    def _wrapped(self, fn, *args):
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise RemoteStorageError(f"{type(exc).__name__}: {exc}") from exc


def _parse_name(name: str) -> tuple[int, uuid.UUID] | None:
    """The start offset and segment id in a store file name (`<20 digits>-<uuid><suffix>`)."""
    if len(name) < 57 or name[20:21] != "-" or not name[:20].isdigit():
        return None
    try:
        return int(name[:20]), uuid.UUID(name[21:57])
    except ValueError:
        return None


def _copy_range(part: FileRange, out) -> None:
    position = 0
    while position < part.size:
        chunk = os.pread(part.fd, min(_COPY_CHUNK_BYTES, part.size - position), position)
        if not chunk:
            raise OSError(f"a segment file ended at {position} of {part.size} bytes while copied")
        out.write(chunk)
        position += len(chunk)
