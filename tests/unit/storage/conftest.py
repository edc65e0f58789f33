import pytest

from protocol.records import Record, build_batch
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.topic_partition import TopicPartition

TP = TopicPartition("topic", 0)


def batch(*values: bytes, timestamp: int = 1_000, key: bytes | None = b"k", **kwargs) -> bytearray:
    """A produced batch (offsets from 0, as producers send them), writable like a request buffer."""
    records = [Record(i, timestamp + i, key, v) for i, v in enumerate(values)]
    return bytearray(build_batch(records, **kwargs))


@pytest.fixture
def open_log(tmp_path):
    """Open (or reopen) the partition log in tmp_path; closed at the end."""
    opened: list[Log] = []

    def open_(config: LogConfig = LogConfig(), **load_args) -> Log:
        log = Log.load(str(tmp_path / TP.dir_name), TP, config, scheduler=InlineScheduler(), **load_args)
        opened.append(log)
        return log

    yield open_
    for log in opened:
        try:
            log.close()
        except (ValueError, OSError):
            pass
