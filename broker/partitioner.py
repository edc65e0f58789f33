"""Kafka's default partitioner hash, for the places where the broker itself picks a partition.

The HTTP API places a keyed record as the Java producer does (murmur2(key) mod the partition
count, broker/http/produce.py), and tiered storage picks a metadata partition as Kafka's
RemoteLogMetadataTopicPartitioner does (broker/remote_log.py). Its own module, so that neither
imports the other's dependencies (the HTTP API's aiohttp is imported only when http.listeners
is set).
"""


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the default partitioner's hash), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h
