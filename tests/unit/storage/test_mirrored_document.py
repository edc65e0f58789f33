import json

import pytest

from storage.mirrored_document import MirroredDocument


def test_the_newest_readable_copy_of_the_version_wins_and_later_saves_follow_it(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    first = MirroredDocument(dirs, "doc.json", "the things")
    first.save({"things": [1]})
    first.save({"things": [1, 2]})
    (dirs[1] / "doc.json").write_text("{torn")  # unreadable: skipped
    (dirs[2] / "doc.json").write_text(json.dumps({"version": 2, "generation": 9, "things": []}))  # another version

    again = MirroredDocument(dirs, "doc.json", "the things")
    assert again.load()["things"] == [1, 2]
    again.save({"things": [3]})
    assert {json.loads((d / "doc.json").read_text())["generation"] for d in dirs} == {3}


def test_nothing_to_load_is_none_and_a_save_no_dir_takes_fails(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a log dir path that is a file: no directory can be made there
    document = MirroredDocument([blocked], "doc.json", "the things")
    assert document.load() is None
    with pytest.raises(OSError, match="no log directory could store the things"):
        document.save({"things": []})
    assert document.generation == 0


def test_entity_configs_keep_each_entity_and_a_failed_write_changes_nothing(tmp_path):
    import asyncio

    from protocol.errors import ErrorCode, KafkaError
    from storage.mirrored_document import EntityConfigs

    async def scenario():
        configs = EntityConfigs([tmp_path / "a"], "entities.json", "the entities")
        await configs.write("x", {"k": "1"})
        await configs.write("y", {"k": "2"})
        await configs.write("x", {})  # empty: removed
        configs.close()
        again = EntityConfigs([tmp_path / "a"], "entities.json", "the entities")
        assert await again.load() == {"y": {"k": "2"}}
        again.close()
        blocked = tmp_path / "file"
        blocked.write_text("")  # a log dir path that is a file: the write fails
        failing = EntityConfigs([blocked], "entities.json", "the entities")
        with pytest.raises(KafkaError) as failed:
            await failing.write("y", {"k": "3"})
        assert failed.value.error_code == ErrorCode.kafka_storage_error
        assert failing.get("y") == {}
        failing.close()

    asyncio.run(scenario())
