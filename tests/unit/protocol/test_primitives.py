from hypothesis import given
from hypothesis import strategies as st

from protocol.primitives import encode_uvarint, read_uvarint


def test_varints_take_one_byte_per_seven_bits_at_each_boundary():
    # 0x7F and 0x3FFF end the one-byte and two-byte encodings (the second written by one pack).
    assert encode_uvarint(0) == b"\x00"
    assert encode_uvarint(0x7F) == b"\x7f"
    assert encode_uvarint(0x80) == b"\x80\x01"
    assert encode_uvarint(300) == b"\xac\x02"
    assert encode_uvarint(0x3FFF) == b"\xff\x7f"
    assert encode_uvarint(0x4000) == b"\x80\x80\x01"


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_a_varint_reads_back_as_written(value):
    encoded = encode_uvarint(value)
    assert read_uvarint(encoded + b"tail", 0) == (value, len(encoded))
