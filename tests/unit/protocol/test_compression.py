import gzip
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard

from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptRecordError, RecordsTooLargeError

COMPRESSIBLE = b"".join(b"record %d with a repetitive payload; " % i for i in range(5000))
XERIAL_MAGIC = b"\x82SNAPPY\x00"
REAL_CODECS = [codec for codec in Compression if codec != Compression.NONE]


def test_codec_numbers_are_the_attribute_bits():
    assert [(codec.name, int(codec)) for codec in Compression] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", Compression.NONE),
        ("uncompressed", Compression.NONE),
        ("gzip", Compression.GZIP),
        ("snappy", Compression.SNAPPY),
        ("lz4", Compression.LZ4),
        ("zstd", Compression.ZSTD),
        ("ZSTD", Compression.ZSTD),
    ],
)
def test_from_name(name, codec):
    assert Compression.from_name(name) is codec


@pytest.mark.parametrize("name", ["", "producer", "brotli", "gzip2"])
def test_from_name_rejects_unknown_names(name):
    with pytest.raises(ValueError):
        Compression.from_name(name)


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", COMPRESSIBLE, bytes(range(256)) * 700])
def test_round_trip(codec, data):
    compressed = compress(codec, data)
    assert isinstance(compressed, bytes)
    assert decompress(codec, compressed) == data


@pytest.mark.parametrize("codec", list(Compression))
def test_accepts_memoryviews_both_ways(codec):
    view = memoryview(b"__" + COMPRESSIBLE + b"__")[2:-2]
    compressed = compress(codec, view)
    assert decompress(codec, memoryview(compressed)) == COMPRESSIBLE


def test_decompress_accepts_plain_int_codes():
    assert decompress(2, compress(Compression.SNAPPY, b"abc")) == b"abc"


def test_none_is_identity():
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, b"abc") == b"abc"


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_compresses(codec):
    assert len(compress(codec, COMPRESSIBLE)) < len(COMPRESSIBLE) // 4


def test_gzip_writes_a_gzip_container():
    compressed = compress(Compression.GZIP, COMPRESSIBLE)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == COMPRESSIBLE


def test_gzip_reads_several_members():
    members = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, members) == b"first second"


def test_snappy_writes_xerial_framing_in_32k_blocks():
    compressed = compress(Compression.SNAPPY, COMPRESSIBLE)
    assert compressed[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", compressed, 8) == (1, 1)
    pos, blocks = 16, []
    while pos < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(compressed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert pos == len(compressed)
    assert b"".join(blocks) == COMPRESSIBLE
    assert [len(block) for block in blocks[:-1]] == [32 * 1024] * (len(blocks) - 1)


def xerial_frame(*blocks: bytes, version_fields: bytes = struct.pack(">ii", 1, 1)) -> bytes:
    """Xerial framing made by hand from raw snappy blocks."""
    framed = [XERIAL_MAGIC, version_fields]
    for block in blocks:
        raw = bytes(cramjam.snappy.compress_raw(block))
        framed += [struct.pack(">i", len(raw)), raw]
    return b"".join(framed)


def test_snappy_reads_hand_made_xerial_frames():
    assert decompress(Compression.SNAPPY, xerial_frame(b"one ", b"two ", b"three")) == (
        b"one two three"
    )


def test_snappy_ignores_xerial_version_fields():
    # Some writers put the version fields little-endian; the framing is the same either way.
    frame = xerial_frame(b"payload", version_fields=struct.pack("<ii", 1, 1))
    assert decompress(Compression.SNAPPY, frame) == b"payload"


def test_snappy_reads_an_empty_xerial_stream():
    assert decompress(Compression.SNAPPY, xerial_frame()) == b""


def test_snappy_reads_a_raw_block():
    raw = bytes(cramjam.snappy.compress_raw(COMPRESSIBLE))
    assert raw[:8] != XERIAL_MAGIC
    assert decompress(Compression.SNAPPY, raw) == COMPRESSIBLE


def test_lz4_writes_independent_blocks_without_content_size():
    compressed = compress(Compression.LZ4, COMPRESSIBLE)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian
    flags = compressed[4]
    assert flags >> 6 == 1  # frame format version 01
    assert flags & 0x20  # block independence
    assert not flags & 0x08  # no content size
    assert lz4.frame.decompress(compressed) == COMPRESSIBLE


@pytest.mark.parametrize("linked", [False, True])
def test_lz4_reads_frames_with_content_size_and_linked_blocks(linked):
    frame = lz4.frame.compress(
        COMPRESSIBLE, block_linked=linked, store_size=True, content_checksum=True
    )
    assert decompress(Compression.LZ4, frame) == COMPRESSIBLE


def test_zstd_reads_frames_without_content_size():
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(COMPRESSIBLE)
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, frame) == COMPRESSIBLE


def test_zstd_reads_streamed_frames():
    compressor = zstandard.ZstdCompressor().compressobj()
    frame = compressor.compress(COMPRESSIBLE[:1000]) + compressor.compress(COMPRESSIBLE[1000:])
    frame += compressor.flush()
    assert decompress(Compression.ZSTD, frame) == COMPRESSIBLE


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_reads_concatenated_frames(codec):
    assert decompress(codec, compress(codec, b"first ") + compress(codec, b"second")) == (
        b"first second"
    )


@pytest.mark.parametrize("codec", REAL_CODECS)
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data[: len(data) // 2], id="truncated-half"),
        pytest.param(lambda data: data[:-1], id="truncated-last-byte"),
        pytest.param(lambda data: data[:3], id="truncated-header"),
        pytest.param(lambda data: b"\x00\xffnot compressed at all\xff" * 3, id="garbage"),
    ],
)
def test_undecodable_input_raises_corrupt_record(codec, damage):
    with pytest.raises(CorruptRecordError):
        decompress(codec, damage(compress(codec, COMPRESSIBLE)))


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_damaged_middle_raises_corrupt_record(codec):
    compressed = bytearray(compress(codec, COMPRESSIBLE))
    compressed[20 : len(compressed) - 20] = b"\xff" * (len(compressed) - 40)
    with pytest.raises(CorruptRecordError):
        decompress(codec, bytes(compressed))


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_trailing_garbage_after_a_frame_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, compress(codec, COMPRESSIBLE) + b"trailing garbage")


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(XERIAL_MAGIC + b"\x00\x00\x00\x01", id="short-header"),
        pytest.param(xerial_frame(b"block") + b"\x00\x00", id="truncated-length"),
        pytest.param(xerial_frame(b"block")[:-2], id="block-past-end"),
        pytest.param(xerial_frame() + struct.pack(">i", -5) + b"xxxxx", id="negative-length"),
        pytest.param(xerial_frame() + struct.pack(">i", 4) + b"\xff\xff\xff\xff", id="bad-block"),
    ],
)
def test_broken_xerial_framing_raises_corrupt_record(frame):
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, frame)


@pytest.mark.parametrize("code", [5, 6, 7])
def test_unknown_codec_is_corrupt(code):
    with pytest.raises(CorruptRecordError):
        decompress(code, b"data")


def test_gzip_skips_zero_padding_between_and_after_members():
    members = gzip.compress(b"first ") + bytes(5) + gzip.compress(b"second") + bytes(3)
    assert decompress(Compression.GZIP, members) == b"first second"


# --------------------------------------------------------------------- bounded decompression


@pytest.mark.parametrize("codec", list(Compression))
def test_content_up_to_max_size_decompresses(codec):
    compressed = compress(codec, COMPRESSIBLE)
    assert decompress(codec, compressed, max_size=len(COMPRESSIBLE)) == COMPRESSIBLE


@pytest.mark.parametrize("codec", list(Compression))
def test_content_over_max_size_is_refused(codec):
    with pytest.raises(RecordsTooLargeError):
        decompress(codec, compress(codec, COMPRESSIBLE), max_size=len(COMPRESSIBLE) - 1)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_the_limit_spans_every_frame(codec):
    frames = compress(codec, b"a" * 600) + compress(codec, b"b" * 600)
    assert decompress(codec, frames, max_size=1200) == b"a" * 600 + b"b" * 600
    with pytest.raises(RecordsTooLargeError):
        decompress(codec, frames, max_size=1000)


def test_the_limit_spans_every_xerial_block():
    frame = xerial_frame(b"a" * 600, b"b" * 600)
    assert len(decompress(Compression.SNAPPY, frame, max_size=1200)) == 1200
    with pytest.raises(RecordsTooLargeError):
        decompress(Compression.SNAPPY, frame, max_size=1000)


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_a_compression_bomb_is_stopped_early(codec):
    bomb = compress(codec, bytes(64 << 20))  # 64 MiB of zeros in a few kilobytes or less
    assert len(bomb) < 4 << 20
    tracemalloc.start()
    try:
        with pytest.raises(RecordsTooLargeError):
            decompress(codec, bomb, max_size=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


@pytest.mark.parametrize("codec", REAL_CODECS)
def test_a_bounded_decompression_still_finds_truncation(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, compress(codec, COMPRESSIBLE)[:-1], max_size=1 << 20)
