from replication.mirror.checkpoints import OffsetTranslator
from replication.mirror.records import OffsetPair


def translator_with(*pairs: tuple[int, int], kept: int = 1024) -> OffsetTranslator:
    translator = OffsetTranslator(kept)
    for source, target in pairs:
        translator.add(OffsetPair("orders", 0, source, target))
    return translator


def test_a_group_resumes_at_the_target_offset_of_the_newest_pair_not_after_its_position():
    # three transactions: source 0..99 -> target 0..99, 100..199 -> 101..200, 200..249 -> 202..251
    translator = translator_with((100, 100), (200, 201), (250, 252))
    assert translator.translate("orders", 0, 100) == 100  # at a pair: exact
    assert translator.translate("orders", 0, 150) == 100  # inside a transaction: re-reads 100..149
    assert translator.translate("orders", 0, 250) == 252
    assert translator.translate("orders", 0, 400) == 252  # ahead of the mirror: waits for it there


def test_a_group_behind_every_known_pair_is_not_translated():
    assert translator_with((100, 100)).translate("orders", 0, 99) is None
    assert translator_with().translate("orders", 0, 10) is None
    assert translator_with((100, 100)).translate("orders", 1, 100) is None


def test_only_the_newest_pairs_are_kept():
    translator = translator_with((10, 10), (20, 21), (30, 32), kept=2)
    assert translator.translate("orders", 0, 15) is None
    assert translator.translate("orders", 0, 25) == 21


def test_pairs_older_than_the_newest_are_ignored():
    translator = translator_with((100, 100), (50, 50))
    assert translator.translate("orders", 0, 60) is None
