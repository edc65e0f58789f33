"""dump-log over segment files written here with protocol.records (the broker's own writer);
the compat test runs it over segments a broker wrote."""

import argparse
import struct

from broker.admin import dump_log
from protocol.record_batch import TimestampType
from protocol.records import ControlRecordType, Header, Record, build_batch, control_record


def _segment(tmp_path, batches) -> tuple:
    log = tmp_path / "00000000000000000000.log"
    data = b"".join(batches)
    log.write_bytes(data)
    return log, data


def _args(files, **flags):
    return argparse.Namespace(
        files=",".join(str(f) for f in files), print_data_log=flags.get("print_data_log", False),
        deep_iteration=flags.get("deep_iteration", False), skip_record_metadata=False,
        verify_index_only=flags.get("verify_index_only", False), index_sanity_check=flags.get("index_sanity_check", False),
        max_message_size=5 * 1024 * 1024, max_bytes=2**31 - 1,
    )


def _batches():
    first = build_batch([
        Record(0, 1000, b"k0", b"v0", (Header("h", b"x"),)),
        Record(1, 1001, None, b"v1"),
    ], producer_id=7, producer_epoch=0, base_sequence=5)
    marker = build_batch([control_record(ControlRecordType.COMMIT, 3, 2, 1002)], producer_id=7, producer_epoch=0,
                         is_transactional=True, is_control=True, timestamp_type=TimestampType.CREATE_TIME)
    return first, marker


def test_batches_and_records_print_as_kafka_dump_log_does(tmp_path, capsys):
    log, _ = _segment(tmp_path, _batches())
    assert dump_log.run_offline(_args([log], print_data_log=True)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 5 lastSequence: 6 producerId: 7 producerEpoch: 0 "
        "partitionLeaderEpoch: -1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1001 size: ")
    assert lines[2].endswith("magic: 2 compresscodec: none crc: " + lines[2].split("crc: ")[1].split()[0] + " isvalid: true")
    assert lines[3] == "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: 5 headerKeys: [h] key: k0 payload: v0"
    assert lines[4] == "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 2 sequence: 6 headerKeys: [] payload: v1"
    assert "isTransactional: true isControl: true" in lines[5]
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")


def test_a_batch_whose_crc_does_not_match_is_invalid_and_fails_the_run(tmp_path, capsys):
    first, marker = _batches()
    damaged = bytearray(first)
    damaged[-1] ^= 0xFF
    log, _ = _segment(tmp_path, [bytes(damaged), marker])
    assert dump_log.run_offline(_args([log])) == 1
    assert "isvalid: false" in capsys.readouterr().out


def test_bytes_after_the_last_whole_batch_are_reported(tmp_path, capsys):
    first, _ = _batches()
    log, _ = _segment(tmp_path, [first, first[:20]])
    assert dump_log.run_offline(_args([log])) == 1
    assert f"Found 20 invalid bytes at the end of {log.name}" in capsys.readouterr().out


def test_an_index_entry_pointing_at_the_wrong_batch_is_a_mismatch(tmp_path, capsys):
    first, marker = _batches()
    log, data = _segment(tmp_path, [first, marker])
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 2, len(first)))  # the marker batch: last offset 2
    assert dump_log.run_offline(_args([index])) == 0
    assert "offset: 2 position: " in capsys.readouterr().out
    index.write_bytes(struct.pack(">ii", 1, len(first)))
    assert dump_log.run_offline(_args([index], verify_index_only=True)) == 1
    err = capsys.readouterr().err
    assert f"Mismatches in :{index.resolve()}" in err and "Index offset: 1, log offset: 2" in err


def test_index_sanity_check_runs_the_brokers_own_check(tmp_path, capsys):
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200))  # offsets going back
    assert dump_log.run_offline(_args([index], index_sanity_check=True)) == 1
    assert "Error:" in capsys.readouterr().err


def test_the_time_index_is_checked_against_the_batches_max_timestamps(tmp_path, capsys):
    first, marker = _batches()
    _segment(tmp_path, [first, marker])
    time_index = tmp_path / "00000000000000000000.timeindex"
    time_index.write_bytes(struct.pack(">qi", 1001, 1) + struct.pack(">qi", 1500, 2))
    assert dump_log.run_offline(_args([time_index])) == 1
    out, err = capsys.readouterr()
    assert "timestamp: 1001 offset: 1" in out
    assert "Index timestamp: 1500, log timestamp: 1002" in err
