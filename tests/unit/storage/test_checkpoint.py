import pytest

from storage.checkpoint import CorruptCheckpointError, OffsetCheckpointFile
from storage.topic_partition import TopicPartition


def test_round_trip_in_kafkas_text_format(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(str(path))
    assert checkpoint.read() == {}
    checkpoint.write({TopicPartition("a-b", 0): 5, TopicPartition("c", 12): 0})
    assert path.read_text() == "0\n2\na-b 0 5\nc 12 0\n"
    assert checkpoint.read() == {TopicPartition("a-b", 0): 5, TopicPartition("c", 12): 0}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\na 0 1\n", "0\n1\na zero 1\n", ""])
def test_corrupt_files_are_reported(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(str(path)).read()


def test_partition_directory_names():
    assert TopicPartition("my-topic", 3).dir_name == "my-topic-3"
    assert TopicPartition.from_dir_name("my-topic-3") == TopicPartition("my-topic", 3)
    assert TopicPartition.from_dir_name("t-0.8e1f-delete") is None
    assert TopicPartition.from_dir_name("nodash") is None
