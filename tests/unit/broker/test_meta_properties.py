"""broker.meta_properties: Kafka's meta.properties read and written across log dirs, and the
choice of the broker id (Kafka's getOrGenerateBrokerId)."""

import pytest

from broker import meta_properties
from broker.meta_properties import NO_ID, BrokerMetadataError, choose_broker_id, read_broker_id, write_broker_id


def test_written_to_every_log_dir_in_kafkas_format_and_read_back(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        (tmp_path / d).mkdir()
    assert read_broker_id(dirs) == NO_ID
    write_broker_id(dirs, 1001)
    for d in dirs:
        lines = (tmp_path / d / meta_properties.FILE).read_text().splitlines()
        assert "version=0" in lines and "broker.id=1001" in lines
    assert read_broker_id(dirs) == 1001


def test_a_log_dir_without_the_file_takes_the_others_id(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_broker_id([str(tmp_path / "a")], 7)
    assert read_broker_id([str(tmp_path / "a"), str(tmp_path / "b")]) == 7


def test_log_dirs_naming_different_ids_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_broker_id([str(tmp_path / "a")], 1)
    write_broker_id([str(tmp_path / "b")], 2)
    with pytest.raises(BrokerMetadataError, match="log dirs belong to different brokers"):
        read_broker_id([str(tmp_path / "a"), str(tmp_path / "b")])


def test_an_invalid_stored_id_is_refused(tmp_path):
    (tmp_path / meta_properties.FILE).write_text("version=0\nbroker.id=x\n")
    with pytest.raises(BrokerMetadataError, match="invalid broker.id"):
        read_broker_id([str(tmp_path)])


def test_the_choice_of_the_broker_id():
    assert choose_broker_id(configured=-1, stored=1001, generation_enabled=True) == 1001
    assert choose_broker_id(configured=3, stored=3, generation_enabled=True) == 3
    assert choose_broker_id(configured=3, stored=NO_ID, generation_enabled=False) == 3
    assert choose_broker_id(configured=-1, stored=NO_ID, generation_enabled=True) is None  # generate one
    with pytest.raises(BrokerMetadataError, match="broker.id 3 is configured but the log dirs belong to broker 1001"):
        choose_broker_id(configured=3, stored=1001, generation_enabled=True)
    with pytest.raises(BrokerMetadataError, match="broker.id.generation.enable is false"):
        choose_broker_id(configured=-1, stored=NO_ID, generation_enabled=False)
