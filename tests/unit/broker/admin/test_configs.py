import argparse

import pytest
from kio.schema.describe_client_quotas.v1.response import EntityData, EntryData, ValueData
from kio.schema.describe_configs.v4.response import DescribeConfigsResourceResult, DescribeConfigsSynonym

from broker.admin import configs
from broker.admin.connection import UsageError


def _parse(*argv):
    parser = argparse.ArgumentParser()
    configs.add_arguments(parser, "configs")
    return parser.parse_args(argv)


def test_add_config_keeps_commas_inside_brackets():
    assert configs.parse_add_config("cleanup.policy=[compact,delete],retention.ms=1000,a=") == {
        "cleanup.policy": "compact,delete", "retention.ms": "1000", "a": ""}
    with pytest.raises(UsageError):
        configs.parse_add_config("novalue")


def test_entity_flags_and_their_shortcuts_name_the_same_entities():
    assert configs.entities(_parse("--describe", "--entity-type", "topics", "--entity-name", "t")) == [("topics", "t")]
    assert configs.entities(_parse("--describe", "--topic", "t")) == [("topics", "t")]
    assert configs.entities(_parse("--alter", "--broker-defaults")) == [("brokers", "")]
    assert configs.entities(_parse("--describe", "--entity-type", "users", "--entity-default",
                                   "--entity-type", "clients")) == [("users", ""), ("clients", None)]
    assert configs.entities(_parse("--describe", "--user", "alice", "--client", "app")) == [
        ("users", "alice"), ("clients", "app")]
    with pytest.raises(UsageError, match="should not be used in conjunction"):
        configs.entities(_parse("--describe", "--topic", "t", "--entity-type", "topics"))


def test_entries_print_with_their_synonyms_as_kafkas_config_command():
    entry = DescribeConfigsResourceResult(
        name="retention.ms", value="1000", read_only=False, config_source=1, is_sensitive=False,
        synonyms=(DescribeConfigsSynonym(name="retention.ms", value="1000", source=1),
                  DescribeConfigsSynonym(name="log.retention.hours", value="168", source=5)),
        config_type=0, documentation=None,
    )
    assert configs.entry_lines([entry]) == [
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"
    ]


def test_quota_lines_name_the_entity_and_its_values_as_doubles():
    entries = [
        EntryData(entity=(EntityData(entity_type="user", entity_name="alice"), EntityData(entity_type="client-id", entity_name=None)),
                  values=(ValueData(key="producer_byte_rate", value=1024.0),)),
    ]
    assert configs.quota_lines(entries) == [
        "Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0"]
