"""broker.security.authorizer: Kafka's AclAuthorizer decisions (matching, implications, DENY
winning, prefixes, the wildcard, hosts, super users, allow.everyone.if.no.acl.found), ACL
administration and the decision log. ACLs are kept in the real file store in tmp_path."""

import asyncio
import logging

import pytest

from broker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    MATCH_ALL,
)
from broker.security.acl_store import FileAclStore
from broker.security.authorizer import (
    AclAuthorizer,
    acl_host,
    authorizer_enabled,
    parse_super_users,
)
from broker.session import KafkaPrincipal, Session

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = Session("10.0.0.1:5000", "PLAINTEXT", principal=KafkaPrincipal("User", "alice"))
BOB = Session("10.0.0.2:5000", "PLAINTEXT", principal=KafkaPrincipal("User", "bob"))


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def acl(resource, principal="User:alice", op=Op.READ, permission=ALLOW, host="*") -> AclBinding:
    return AclBinding(resource, AccessControlEntry(principal, host, op, permission))


def make(tmp_path, *bindings, super_users="", allow_everyone=False) -> AclAuthorizer:
    async def build():
        authorizer = AclAuthorizer(FileAclStore([str(tmp_path)]), parse_super_users(super_users), allow_everyone)
        await authorizer.start()
        assert await authorizer.create_acls(list(bindings)) == [None] * len(bindings)
        return authorizer

    return asyncio.run(build())


def test_a_literal_allow_grants_its_operation_to_its_principal_only(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders")))
    assert authorizer.authorize(ALICE, Op.READ, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.WRITE, topic("orders"))
    assert not authorizer.authorize(BOB, Op.READ, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.READ, topic("orders2"))


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_and_alter_imply_describe(tmp_path, granted):
    authorizer = make(tmp_path, acl(topic("orders"), op=granted))
    assert authorizer.authorize(ALICE, Op.DESCRIBE, topic("orders"))


def test_alter_configs_implies_describe_configs_and_nothing_implies_the_rest(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders"), op=Op.ALTER_CONFIGS), acl(topic("t2"), op=Op.CREATE))
    assert authorizer.authorize(ALICE, Op.DESCRIBE_CONFIGS, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.DESCRIBE, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.DESCRIBE, topic("t2"))


def test_all_allows_every_operation(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders"), op=Op.ALL))
    assert all(authorizer.authorize(ALICE, op, topic("orders")) for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS))


def test_deny_wins_over_allow_and_is_not_implied(tmp_path):
    authorizer = make(
        tmp_path,
        acl(topic("orders"), op=Op.ALL),
        acl(topic("orders"), op=Op.WRITE, permission=DENY),
        acl(topic("*"), op=Op.READ, permission=DENY),
    )
    assert not authorizer.authorize(ALICE, Op.WRITE, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.READ, topic("orders"))  # the wildcard's DENY
    # DENY READ and WRITE do not deny DESCRIBE, which ALL allows
    assert authorizer.authorize(ALICE, Op.DESCRIBE, topic("orders"))


def test_a_deny_for_all_principals_denies_everyone(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders")), acl(topic("orders"), principal="User:*", permission=DENY))
    assert not authorizer.authorize(ALICE, Op.READ, topic("orders"))


def test_prefixed_acls_apply_to_names_they_start(tmp_path):
    authorizer = make(tmp_path, acl(topic("sales-", PatternType.PREFIXED)))
    assert authorizer.authorize(ALICE, Op.READ, topic("sales-eu"))
    assert authorizer.authorize(ALICE, Op.READ, topic("sales-"))
    assert not authorizer.authorize(ALICE, Op.READ, topic("sales"))
    assert not authorizer.authorize(ALICE, Op.READ, topic("presales-eu"))


def test_the_wildcard_resource_and_principal_match_every_name_and_user(tmp_path):
    authorizer = make(tmp_path, acl(topic("*"), principal="User:*"))
    assert authorizer.authorize(BOB, Op.READ, topic("anything"))
    assert not authorizer.authorize(BOB, Op.READ, ResourcePattern(ResourceType.GROUP, "anything"))


def test_hosts_match_exactly_or_by_wildcard(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders"), host="10.0.0.1"), acl(topic("orders"), principal="User:bob", host="10.0.0.9"))
    assert authorizer.authorize(ALICE, Op.READ, topic("orders"))
    assert not authorizer.authorize(BOB, Op.READ, topic("orders"))


def test_ipv6_clients_are_named_as_java_names_them():
    assert acl_host("::1") == "0:0:0:0:0:0:0:1"
    assert acl_host("::ffff:10.1.2.3") == "10.1.2.3"
    assert acl_host("10.1.2.3") == "10.1.2.3"


def test_super_users_are_allowed_everything(tmp_path):
    authorizer = make(tmp_path, acl(topic("orders"), principal="User:bob", permission=DENY), super_users="User:admin; User:bob")
    assert authorizer.authorize(BOB, Op.READ, topic("orders"))
    assert not authorizer.authorize(ALICE, Op.READ, topic("orders"))


def test_without_acls_a_resource_is_closed_unless_allow_everyone_if_no_acl_found(tmp_path):
    assert not make(tmp_path / "closed").authorize(ALICE, Op.READ, topic("orders"))
    open_authorizer = make(tmp_path / "open", acl(topic("other")), allow_everyone=True)
    assert open_authorizer.authorize(ALICE, Op.READ, topic("orders"))
    # an ACL for someone else applies to the resource: no longer open to all
    assert not open_authorizer.authorize(BOB, Op.READ, topic("other"))


def test_a_pattern_to_authorize_must_be_literal(tmp_path):
    with pytest.raises(ValueError, match="literal"):
        make(tmp_path).authorize(ALICE, Op.READ, topic("x", PatternType.PREFIXED))


def test_by_resource_type_any_allow_not_covered_by_a_deny(tmp_path):
    assert make(tmp_path / "a", acl(topic("t1"), op=Op.WRITE)).authorize_by_resource_type(ALICE, Op.WRITE, ResourceType.TOPIC)
    assert not make(tmp_path / "b", acl(topic("t1"), op=Op.READ)).authorize_by_resource_type(ALICE, Op.WRITE, ResourceType.TOPIC)
    denied = make(
        tmp_path / "c",
        acl(topic("sales-eu"), op=Op.WRITE),
        acl(topic("sales-", PatternType.PREFIXED), op=Op.WRITE, permission=DENY),
    )
    assert not denied.authorize_by_resource_type(ALICE, Op.WRITE, ResourceType.TOPIC)
    wildcard_deny = make(tmp_path / "d", acl(topic("t1"), op=Op.WRITE), acl(topic("*"), op=Op.WRITE, permission=DENY), allow_everyone=True)
    assert not wildcard_deny.authorize_by_resource_type(ALICE, Op.WRITE, ResourceType.TOPIC)


def test_describe_filters_match_as_kafkas(tmp_path):
    literal, prefixed, wildcard = acl(topic("sales-eu")), acl(topic("sales-", PatternType.PREFIXED)), acl(topic("*"), op=Op.WRITE)
    group = acl(ResourcePattern(ResourceType.GROUP, "g"), principal="User:bob")
    authorizer = make(tmp_path, literal, prefixed, wildcard, group)
    assert set(authorizer.acls(MATCH_ALL)) == {literal, prefixed, wildcard, group}

    def matching(resource_type, name, pattern_type, principal=None):
        return set(authorizer.acls(AclBindingFilter(
            ResourcePatternFilter(resource_type, name, pattern_type),
            AccessControlEntryFilter(principal, None, Op.ANY, AclPermissionType.ANY),
        )))

    assert matching(ResourceType.TOPIC, "sales-eu", PatternType.MATCH) == {literal, prefixed, wildcard}
    assert matching(ResourceType.TOPIC, "sales-eu", PatternType.LITERAL) == {literal}
    assert matching(ResourceType.TOPIC, "sales-", PatternType.ANY) == {prefixed}
    assert matching(ResourceType.ANY, None, PatternType.ANY, "User:bob") == {group}


def test_delete_reports_each_deleted_binding_with_the_first_filter_that_matched(tmp_path):
    a, b, c = acl(topic("t")), acl(topic("t"), op=Op.WRITE), acl(topic("u"))
    authorizer = make(tmp_path, a, b, c)

    def literal_filter(name, op):
        return AclBindingFilter(
            ResourcePatternFilter(ResourceType.TOPIC, name, PatternType.LITERAL),
            AccessControlEntryFilter(None, None, op, AclPermissionType.ANY),
        )

    results = asyncio.run(authorizer.delete_acls([literal_filter("t", Op.ANY), literal_filter("t", Op.READ), literal_filter("v", Op.ANY)]))
    assert sorted(results[0]) == sorted([(a, None), (b, None)])
    assert results[1] == [] and results[2] == []
    assert authorizer.acls(MATCH_ALL) == [c]


def test_invalid_bindings_are_refused_one_by_one(tmp_path):
    authorizer = make(tmp_path)
    results = asyncio.run(authorizer.create_acls([
        acl(topic("a/b")),
        acl(topic("ok")),
        acl(topic("ok"), principal="alice"),
        acl(topic("ok"), op=Op.ANY),
        acl(topic("x", PatternType.MATCH)),
    ]))
    assert results[1] is None
    assert [r.error_code.name for i, r in enumerate(results) if i != 1] == ["invalid_request"] * 4
    assert "invalid resource name: a/b" in str(results[0])
    assert authorizer.acls(MATCH_ALL) == [acl(topic("ok"))]


def test_acls_survive_a_restart_in_the_file_store(tmp_path):
    make(tmp_path, acl(topic("orders")), acl(topic("p-", PatternType.PREFIXED), op=Op.WRITE, permission=DENY))
    reopened = make(tmp_path)
    assert set(reopened.acls(MATCH_ALL)) == {
        acl(topic("orders")), acl(topic("p-", PatternType.PREFIXED), op=Op.WRITE, permission=DENY)
    }


def test_decisions_are_logged_in_kafkas_words(tmp_path, caplog):
    authorizer = make(tmp_path, acl(topic("orders")))
    with caplog.at_level(logging.DEBUG, logger="kafka.authorizer.logger"):
        authorizer.authorize(ALICE, Op.READ, topic("orders"), request="FETCH")
        authorizer.authorize(BOB, Op.READ, topic("orders"), request="FETCH")
    messages = [r.getMessage() for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert (
        "Principal = User:alice is Allowed Operation = Read from host = 10.0.0.1 on resource = "
        "Topic:LITERAL:orders for request = FETCH with resourceRefCount = 1"
    ) in messages
    denied = [r for r in caplog.records if "is Denied" in r.getMessage()]
    assert denied and denied[0].levelno == logging.INFO


def test_only_the_acl_authorizer_class_is_accepted():
    assert not authorizer_enabled("")
    assert authorizer_enabled("kafka.security.authorizer.AclAuthorizer")
    assert authorizer_enabled("logway.acl")
    with pytest.raises(ValueError, match="removed in Kafka 3.0"):
        authorizer_enabled("kafka.security.auth.SimpleAclAuthorizer")
    with pytest.raises(ValueError, match="authorizer.class.name"):
        authorizer_enabled("org.apache.kafka.metadata.authorizer.StandardAuthorizer")


def test_super_users_are_semicolon_separated_principals():
    assert parse_super_users("User:a;User:b ; ") == {KafkaPrincipal("User", "a"), KafkaPrincipal("User", "b")}
    with pytest.raises(ValueError, match="super.users"):
        parse_super_users("admin")
