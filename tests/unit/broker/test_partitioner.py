"""broker.partitioner: Kafka's default partitioner hash."""

from broker.partitioner import murmur2


def test_murmur2_matches_kafkas_utils_test_vectors():
    # Kafka's UtilsTest.testMurmur2: the default partitioner must place keys as Java clients do.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {data: murmur2(data) for data in cases} == cases
