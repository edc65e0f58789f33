import argparse

import pytest

from broker.admin import acls
from broker.admin.connection import UsageError
from broker.security.acl import AclOperation, AclPermissionType, ResourceType


def _parse(*argv):
    parser = argparse.ArgumentParser()
    acls.add_arguments(parser, "acls")
    return parser.parse_args(argv)


def test_operations_principals_and_hosts_multiply_into_entries():
    args = _parse("--add", "--allow-principal", "User:a", "--allow-host", "h1", "--allow-host", "h2",
                  "--deny-principal", "User:b", "--operation", "Read", "--operation", "describe", "--topic", "t")
    entries = acls.bindings(args)[(ResourceType.TOPIC, "t")]
    assert len(entries) == 6
    assert ("User:b", "*", AclOperation.DESCRIBE, AclPermissionType.DENY) in entries


def test_producer_and_consumer_conveniences_are_kafkas():
    producer = acls.bindings(_parse("--add", "--allow-principal", "User:p", "--producer", "--idempotent",
                                    "--topic", "t", "--transactional-id", "x"))
    assert {e[2] for e in producer[(ResourceType.TOPIC, "t")]} == {AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE}
    assert {e[2] for e in producer[(ResourceType.TRANSACTIONAL_ID, "x")]} == {AclOperation.WRITE, AclOperation.DESCRIBE}
    assert [e[2] for e in producer[(ResourceType.CLUSTER, "kafka-cluster")]] == [AclOperation.IDEMPOTENT_WRITE]
    consumer = acls.bindings(_parse("--add", "--allow-principal", "User:c", "--consumer", "--topic", "t", "--group", "g"))
    assert [e[2] for e in consumer[(ResourceType.GROUP, "g")]] == [AclOperation.READ]
    with pytest.raises(UsageError, match="--group"):
        acls.bindings(_parse("--add", "--allow-principal", "User:c", "--consumer", "--topic", "t"))


def test_patterns_and_entries_print_as_kafkas_to_string():
    assert acls.pattern_text(2, "orders", 4) == "ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)"
    assert acls.entry_text("User:a", "*", 3, 3) == "(principal=User:a, host=*, operation=READ, permissionType=ALLOW)"


def test_adding_takes_only_literal_or_prefixed_patterns():
    with pytest.raises(UsageError, match="not valid when adding"):
        acls._pattern_type(_parse("--add", "--resource-pattern-type", "MATCH"), adding=True)
    assert acls._pattern_type(_parse("--list"), adding=False).name == "ANY"
