"""The compression codecs of record batch v2: the records section of a batch, compressed whole.

The codec is the low 3 bits of the batch attributes. Each codec's byte format, as Kafka clients
write it:

- GZIP: a gzip container (RFC 1952), possibly several members back to back.
- SNAPPY: the Java client writes xerial "snappy-java" stream framing: the 8-byte magic
  b"\\x82SNAPPY\\x00", two int32 fields (version, minimum compatible version), then blocks, each
  [int32 big-endian compressed length][raw snappy block]. librdkafka may write one raw snappy block
  without any framing. Both are read; the xerial framing is written, since every client reads it.
- LZ4: the LZ4 frame format (magic 0x184D2204) with independent blocks.
- ZSTD: zstd frames, whose header may lack the content size (Java and librdkafka stream them).

Every failure to decode comes out as CorruptRecordError, whatever library raised it. A caller
that decompresses untrusted input may bound the content: `decompress(..., max_size=n)` stops with
RecordsTooLargeError as soon as more than n bytes come out, so a few compressed bytes that expand
to gigabytes (a "compression bomb") never reach memory.
"""

import enum
import struct
import zlib
from collections.abc import Callable
from typing import Any

import cramjam
import lz4.frame
import zstandard

from protocol.errors import CorruptRecordError, RecordsTooLargeError

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    """A codec, numbered as in bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> "Compression":
        """The codec for a `compression.type` config value ("none"/"uncompressed", "gzip", ...)."""
        try:
            return _CODECS_BY_NAME[name.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown compression type {name!r}") from None


_CODECS_BY_NAME = {
    "none": Compression.NONE,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_VERSION = 1
_XERIAL_MIN_COMPATIBLE_VERSION = 1
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", _XERIAL_VERSION, _XERIAL_MIN_COMPATIBLE_VERSION)
# snappy-java's default block size; readers size their buffers by block, so stay with it.
_XERIAL_BLOCK_SIZE = 32 * 1024
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")

_ZSTD_LEVEL = 3
_ZSTD_READ_BYTES = 1 << 20
_GZIP_WBITS = 31  # zlib's window bits for the gzip container


def compress(codec: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a records section with `codec` (NONE returns the bytes unchanged)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_compress(data)
    if codec == Compression.SNAPPY:
        return _xerial_snappy_compress(data)
    if codec == Compression.LZ4:
        # Kafka's Java reader decompresses each block on its own, so blocks must not be linked;
        # it writes no content size either.
        return lz4.frame.compress(data, block_linked=False, store_size=False)
    if codec == Compression.ZSTD:
        # A compressor per call: zstandard's contexts must not be shared between threads.
        return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(data)
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(
    codec: Compression | int, data: bytes | bytearray | memoryview, max_size: int | None = None
) -> bytes:
    """Decompress a records section; raise CorruptRecordError if it does not decode.

    With `max_size`, content longer than that raises RecordsTooLargeError before more than about
    `max_size` bytes are held. An empty input is corrupt for every real codec: each container has
    a non-empty header.
    """
    try:
        codec = Compression(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None
    if codec == Compression.NONE:
        _check_size(len(data), max_size, codec)
        return bytes(data)
    if not len(data):
        raise CorruptRecordError(f"empty {codec.name} payload")
    try:
        return _DECOMPRESSORS[codec](data, max_size)
    except (CorruptRecordError, RecordsTooLargeError):
        raise
    except (
        zlib.error,
        cramjam.DecompressionError,
        RuntimeError,  # lz4.frame
        zstandard.ZstdError,
    ) as exc:
        raise CorruptRecordError(f"{codec.name} payload does not decompress: {exc}") from None


def _check_size(size: int, max_size: int | None, codec: Compression) -> None:
    if max_size is not None and size > max_size:
        raise RecordsTooLargeError(
            f"{codec.name} records section decompresses to more than {max_size} bytes"
        )


def _gzip_compress(data: bytes | bytearray | memoryview) -> bytes:
    # zlib leaves mtime at 0 in the gzip header, so output is deterministic.
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _xerial_snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    chunks = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        chunks.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
        chunks.append(block)
    return b"".join(chunks)


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    # Zero bytes between and after members are skipped, as the gzip module does.
    return _decompress_frames(
        data,
        lambda: zlib.decompressobj(_GZIP_WBITS),
        Compression.GZIP,
        max_size,
        padding=b"\x00",
    )


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    view = memoryview(data)
    if view[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
        return _xerial_snappy_decompress(view, max_size)
    return _raw_snappy_decompress(view, max_size, 0)


def _raw_snappy_decompress(view: memoryview, max_size: int | None, size_so_far: int) -> bytes:
    # A raw snappy block starts with its content length: check it before decompressing.
    if max_size is not None:
        declared = cramjam.snappy.decompress_raw_len(view)
        _check_size(size_so_far + declared, max_size, Compression.SNAPPY)
    return bytes(cramjam.snappy.decompress_raw(view))


def _xerial_snappy_decompress(view: memoryview, max_size: int | None) -> bytes:
    """Decode xerial framing. The version fields are not checked: some writers get their byte
    order wrong, and there has only ever been one version of the framing."""
    if len(view) < len(_XERIAL_HEADER):
        raise CorruptRecordError("xerial snappy header is truncated")
    pos = len(_XERIAL_HEADER)
    blocks = []
    size = 0
    while pos < len(view):
        if len(view) - pos < _XERIAL_BLOCK_LENGTH.size:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {pos}")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += _XERIAL_BLOCK_LENGTH.size
        if length < 0 or length > len(view) - pos:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes at byte {pos}")
        block = _raw_snappy_decompress(view[pos : pos + length], max_size, size)
        blocks.append(block)
        size += len(block)
        pos += length
    return b"".join(blocks)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    return _decompress_frames(
        data, lz4.frame.LZ4FrameDecompressor, Compression.LZ4, max_size
    )


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int | None) -> bytes:
    # A streaming decompressor, because one-shot decompress() needs the content size in the frame
    # header, and Java and librdkafka leave it out. Its decompressobj cannot stop at a length, so
    # a bounded call first measures the content with a reader that can; the reader, though, does
    # not tell a truncated frame from a whole one, which the second pass does.
    if max_size is not None:
        _check_size(_zstd_content_size(data, max_size + 1), max_size, Compression.ZSTD)
    return _decompress_frames(
        data, zstandard.ZstdDecompressor().decompressobj, Compression.ZSTD, None
    )


def _zstd_content_size(data: bytes | bytearray | memoryview, limit: int) -> int:
    """The content size of zstd frames, counted up to `limit` bytes at most."""
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    size = 0
    while size < limit:
        chunk = reader.read(min(limit - size, _ZSTD_READ_BYTES))
        if not chunk:
            break
        size += len(chunk)
    return size


def _decompress_frames(
    data: bytes | bytearray | memoryview,
    new_decompressor: Callable[[], Any],
    codec: Compression,
    max_size: int | None,
    padding: bytes = b"",
) -> bytes:
    """Decode back-to-back frames (their concatenation is the content); a frame must end cleanly.

    `new_decompressor()` returns an object with decompress(), eof and unused_data, as zlib's and
    the lz4 and zstandard streaming decompressors do. With `max_size`, decompress() is also given
    the most it may return. Bytes of `padding` between and after frames are skipped.
    """
    chunks = []
    size = 0
    remaining: bytes | memoryview | None = data
    while remaining:
        decompressor = new_decompressor()
        if max_size is None:
            chunk = decompressor.decompress(remaining)
        else:
            chunk = decompressor.decompress(remaining, max_size - size + 1)
        size += len(chunk)
        _check_size(size, max_size, codec)
        chunks.append(chunk)
        if not decompressor.eof:
            raise CorruptRecordError(f"{codec.name} frame is truncated")
        remaining = decompressor.unused_data
        if remaining and padding:
            remaining = remaining.lstrip(padding)
    return b"".join(chunks)


_DECOMPRESSORS: dict[Compression, Callable[[memoryview | bytes | bytearray, int | None], bytes]] = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
    Compression.ZSTD: _zstd_decompress,
}
