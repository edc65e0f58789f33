"""The transaction index: Kafka's 34-byte entries, lookups for fetches, truncation, torn tails."""

import struct

import pytest

from storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, collect_aborted, read_entries


def test_entries_are_kafkas_34_byte_layout(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(str(path))
    assert not path.exists()  # created with the first aborted transaction
    index.append(AbortedTxn(7, 10, 20, 21))
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 10, 20, 21)
    assert ENTRY_SIZE == 34
    index.close()
    assert TransactionIndex(str(path)).entries == [AbortedTxn(7, 10, 20, 21)]


def test_out_of_order_entries_are_refused(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(AbortedTxn(1, 0, 20, 21))
    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 5, 19, 21))


def test_collect_aborted_finds_overlapping_transactions_and_says_when_the_search_is_done(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    index.append(AbortedTxn(3, 12, 15, 16))
    assert collect_aborted(index.entries, 6, 12) == ([AbortedTxn(2, 3, 9, 10)], True)
    assert collect_aborted(index.entries, 0, 100) == ([AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 15, 16)], False)


def test_truncate_and_torn_tail(tmp_path):
    path = tmp_path / "x.txnindex"
    index = TransactionIndex(str(path))
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    index.truncate_to(9)
    assert index.entries == [AbortedTxn(1, 0, 5, 6)]
    assert path.stat().st_size == ENTRY_SIZE
    with open(path, "ab") as file:
        file.write(b"\x00" * 7)
    assert TransactionIndex(str(path)).entries == [AbortedTxn(1, 0, 5, 6)]
    assert path.stat().st_size == ENTRY_SIZE


def test_read_entries_is_read_only(tmp_path):
    path = tmp_path / "x.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 20, 21) + b"\x00" * 5)
    assert read_entries(str(path)) == [AbortedTxn(7, 10, 20, 21)]
    assert path.stat().st_size == ENTRY_SIZE + 5
    assert read_entries(str(tmp_path / "missing.txnindex")) == []
