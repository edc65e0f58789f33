from protocol.record_batch import set_base_offset
from protocol.records import Record, build_batch
from storage.log_config import LogConfig
from storage.segment import _RECENT_BATCHES, AppendedBatch, LogSegment


def append_batches(segment: LogSegment, first_offset: int, count: int, records_each: int = 2) -> None:
    offset = first_offset
    for _ in range(count):
        records = [Record(i, 1_000 + offset + i, b"k", b"v%d" % (offset + i)) for i in range(records_each)]
        data = bytearray(build_batch(records))
        set_base_offset(data, 0, offset)
        segment.append(data, [AppendedBatch(offset + records_each - 1, 1_000 + offset + records_each - 1, len(data))])
        offset += records_each


def test_offsets_are_found_alike_through_the_recent_batches_and_the_sparse_index(tmp_path):
    # A large index interval: one index entry for the whole segment, so only the recent batches
    # (the last _RECENT_BATCHES) spare the scan; every offset must land on the same batch either way.
    config = LogConfig(index_interval_bytes=1 << 20)
    segment = LogSegment.open(str(tmp_path), 100, config, active=True)
    batches = _RECENT_BATCHES * 3
    append_batches(segment, 100, batches)
    end = 100 + 2 * batches
    position_of = {location.header.base_offset: location.position for location in segment.records.batches()}
    for offset in range(90, end + 3):
        location = segment.translate_offset(offset)
        if offset >= end:
            assert location is None
            continue
        expected_base = 100 + max(0, offset - 100) // 2 * 2
        assert (location.header.base_offset, location.position) == (expected_base, position_of[expected_base]), offset
    segment.close()


def span(region) -> tuple[int, int] | None:
    return None if region is None else (region.position, region.length)


def test_reads_through_the_recent_batches_return_the_regions_the_index_finds(tmp_path):
    # The same segment twice: one that remembers its recent batches, one reopened without them.
    config = LogConfig(index_interval_bytes=1 << 20)
    segment = LogSegment.open(str(tmp_path), 100, config, active=True)
    append_batches(segment, 100, _RECENT_BATCHES * 2)
    end = 100 + 4 * _RECENT_BATCHES
    reopened = LogSegment.open(str(tmp_path), 100, config, active=False)
    assert not reopened._recent
    for offset in range(90, end + 3):
        # one batch past max_size or not, ending before the last batch or not, many batches
        for max_size, max_position, min_one_batch in (
            (1, segment.size, True),
            (1, segment.size, False),
            (200, segment.size - 10, True),
            (10**6, segment.size, False),
        ):
            remembered = segment.read(offset, max_size, max_position, min_one_batch)
            indexed = reopened.read(offset, max_size, max_position, min_one_batch)
            assert span(remembered) == span(indexed), (offset, max_size, max_position, min_one_batch)
    reopened.close()
    segment.close()


def test_a_truncation_forgets_the_recent_batches_it_cut(tmp_path):
    config = LogConfig()
    segment = LogSegment.open(str(tmp_path), 0, config, active=True)
    append_batches(segment, 0, 10)  # offsets 0-19
    segment.truncate_to(10, config)
    assert segment.translate_offset(12) is None
    append_batches(segment, 10, 3, records_each=3)  # offsets 10-18, in batches of three
    assert [segment.translate_offset(o).header.base_offset for o in (9, 10, 12, 13, 17, 18)] == [8, 10, 10, 13, 16, 16]
    assert segment.translate_offset(19) is None
    segment.close()
