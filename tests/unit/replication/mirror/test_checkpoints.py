from replication.mirror.checkpoints import OffsetTranslator, resume_offset
from replication.mirror.records import Incarnation, OffsetPair

OLD = Incarnation(b"s" * 16, b"t" * 16)
SOURCE_RECREATED = Incarnation(b"S" * 16, b"t" * 16)
TARGET_RECREATED = Incarnation(b"s" * 16, b"T" * 16)


def translator_with(*pairs: tuple[int, int], kept: int = 1024, incarnation: Incarnation | None = OLD) -> OffsetTranslator:
    translator = OffsetTranslator(kept)
    for source, target in pairs:
        translator.add(OffsetPair("orders", 0, source, target, incarnation))
    return translator


def test_a_group_resumes_at_the_target_offset_of_the_newest_pair_not_after_its_position():
    # three transactions: source 0..99 -> target 0..99, 100..199 -> 101..200, 200..249 -> 202..251
    translator = translator_with((100, 100), (200, 201), (250, 252))
    assert translator.translate("orders", 0, 100, OLD) == 100  # at a pair: exact
    assert translator.translate("orders", 0, 150, OLD) == 100  # inside a transaction: re-reads 100..149
    assert translator.translate("orders", 0, 250, OLD) == 252
    assert translator.translate("orders", 0, 400, OLD) == 252  # ahead of the mirror: waits for it there


def test_a_group_behind_every_known_pair_is_not_translated():
    assert translator_with((100, 100)).translate("orders", 0, 99, OLD) is None
    assert translator_with().translate("orders", 0, 10, OLD) is None
    assert translator_with((100, 100)).translate("orders", 1, 100, OLD) is None


def test_only_the_newest_pairs_are_kept():
    translator = translator_with((10, 10), (20, 21), (30, 32), kept=2)
    assert translator.translate("orders", 0, 15, OLD) is None
    assert translator.translate("orders", 0, 25, OLD) == 21


def test_pairs_older_than_the_newest_are_ignored():
    translator = translator_with((100, 100), (50, 50))
    assert translator.translate("orders", 0, 60, OLD) is None


def test_a_group_is_not_translated_through_pairs_of_a_deleted_topic_on_either_side():
    translator = translator_with((100, 100), (200, 200))
    # recreated topics the flow copies now, and no pair of theirs yet: a group at 150 of the new
    # source topic has nothing to do with the old one's records 100..199
    assert translator.translate("orders", 0, 150, SOURCE_RECREATED) is None
    assert translator.translate("orders", 0, 150, TARGET_RECREATED) is None


def test_pairs_of_a_new_incarnation_replace_those_of_the_old_one():
    translator = translator_with((100, 100), (200, 200))
    # the new source topic is copied after the old one's 200 records of the target topic
    translator.add(OffsetPair("orders", 0, 0, 200, SOURCE_RECREATED))
    translator.add(OffsetPair("orders", 0, 30, 230, SOURCE_RECREATED))
    assert translator.translate("orders", 0, 10, SOURCE_RECREATED) == 200
    assert translator.translate("orders", 0, 150, SOURCE_RECREATED) == 230  # not 100, through the old pairs
    assert translator.translate("orders", 0, 150, OLD) is None


def test_pairs_written_before_pairs_carried_ids_are_taken_as_the_current_topics():
    legacy = translator_with((100, 100), (200, 201), incarnation=None)
    assert legacy.translate("orders", 0, 150, OLD) == 100
    # the first pairs of the upgraded mirror continue them
    legacy.add(OffsetPair("orders", 0, 300, 302, OLD))
    assert legacy.translate("orders", 0, 250, OLD) == 201
    assert legacy.translate("orders", 0, 250, SOURCE_RECREATED) is None


def test_a_partition_resumes_at_its_last_pair_only_if_both_topics_are_still_those_of_the_pair():
    pair = OffsetPair("orders", 0, 100, 120, OLD)
    assert resume_offset(pair, OLD) == 100
    assert resume_offset(pair, SOURCE_RECREATED) is None  # the new source topic: from its beginning
    assert resume_offset(pair, TARGET_RECREATED) is None  # the new target topic: the whole source
    assert resume_offset(None, OLD) is None


def test_a_pair_without_ids_resumes_where_it_says():
    assert resume_offset(OffsetPair("orders", 0, 100, 120), OLD) == 100
