import pytest

from replication.mirror.config import MirrorConfigError, load, parse_mirror_config

BASE = {
    "clusters": "A, B",
    "A.bootstrap.servers": "a:9092",
    "B.bootstrap.servers": "b:9092",
}


def test_only_enabled_flows_run_with_mirrormaker_2_defaults():
    config = parse_mirror_config({**BASE, "A->B.enabled": "true"})
    [flow] = config.flows
    assert flow.name == "A->B"
    assert flow.source.client == {"bootstrap.servers": "a:9092"}
    assert flow.replication_factor == 2
    assert flow.heartbeats_interval_s == 1
    assert flow.refresh_topics_interval_s == 600
    assert flow.topics.fullmatch("anything")
    for excluded in ("mm2-offsets.A.internal", "x-internal", "t.replica", "__consumer_offsets"):
        assert flow.topics_exclude.fullmatch(excluded)
    assert config.separator == "."
    assert (flow.emit_checkpoints, flow.emit_checkpoints_interval_s) == (True, 60)
    assert (flow.sync_group_offsets, flow.sync_group_offsets_interval_s) == (False, 60)
    assert flow.groups.fullmatch("billing")
    for excluded in ("console-consumer-1", "connect-sink", "__internal"):
        assert flow.groups_exclude.fullmatch(excluded)


def test_flow_keys_override_top_level_keys():
    config = parse_mirror_config(
        {
            **BASE,
            "A->B.enabled": "true",
            "B->A.enabled": "true",
            "replication.factor": "3",
            "topics": "orders.*, payments",
            "B->A.replication.factor": "1",
            "B->A.topics.exclude": "payments",
        }
    )
    a_to_b, b_to_a = config.flows
    assert (a_to_b.replication_factor, b_to_a.replication_factor) == (3, 1)
    assert a_to_b.topics.fullmatch("orders-eu") and a_to_b.topics.fullmatch("payments")
    assert not a_to_b.topics.fullmatch("xpayments")  # each pattern matches the whole name
    assert b_to_a.topics_exclude.fullmatch("payments") and not a_to_b.topics_exclude.fullmatch("payments")


def test_cluster_client_settings_map_to_librdkafka_names():
    config = parse_mirror_config(
        {
            **BASE,
            "A->B.enabled": "true",
            "A.security.protocol": "SASL_SSL",
            "A.sasl.mechanism": "SCRAM-SHA-256",
            "A.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mm" password="p\\"w";',
            "A.ssl.truststore.location": "/etc/ca.pem",
            "A.ssl.truststore.type": "PEM",
        }
    )
    assert config.clusters["A"].client == {
        "bootstrap.servers": "a:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-256",
        "sasl.username": "mm",
        "sasl.password": 'p"w',
        "ssl.ca.location": "/etc/ca.pem",
    }


@pytest.mark.parametrize(
    "key",
    ["tasks.max", "A.consumer.max.poll.records", "A->B.offset-syncs.topic.location", "C.bootstrap.servers", "A->C.enabled", "typo"],
)
def test_unknown_or_unsupported_keys_are_refused_by_name(key):
    with pytest.raises(MirrorConfigError, match="Unknown or unsupported configuration|not in clusters") as info:
        parse_mirror_config({**BASE, key: "1"})
    assert key in str(info.value) or "'C'" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("A->B.enabled", "yes", "Expected value to be either true or false"),
        ("replication.factor", "0", "at least 1"),
        ("emit.heartbeats.interval.seconds", "x", "Not a number"),
        ("topics", "orders(", "Invalid value 'orders\\(' for configuration A->B.topics"),
        ("groups.exclude", "[", "Invalid value '\\[' for configuration A->B.groups.exclude"),
        ("A.ssl.truststore.type", "JKS", "only PEM"),
        ("A.sasl.jaas.config", "com.example.Kerberos required;", "of PlainLoginModule or ScramLoginModule"),
        ("A.sasl.jaas.config", "com.example.Broken", "Invalid value for configuration A.sasl.jaas.config"),
    ],
)
def test_invalid_values_are_refused(key, value, message):
    with pytest.raises(MirrorConfigError, match=message):
        parse_mirror_config({**BASE, "A->B.enabled": "true", key: value})


def test_every_cluster_needs_bootstrap_servers():
    with pytest.raises(MirrorConfigError, match='"B.bootstrap.servers"'):
        parse_mirror_config({"clusters": "A, B", "A.bootstrap.servers": "a:9092"})


def test_clusters_is_required():
    with pytest.raises(MirrorConfigError, match='"clusters"'):
        parse_mirror_config({"A.bootstrap.servers": "a:9092"})


def test_a_flow_needs_two_different_clusters():
    with pytest.raises(MirrorConfigError, match="two different clusters"):
        parse_mirror_config({**BASE, "A->A.enabled": "true"})


def test_load_reads_a_properties_file(tmp_path):
    path = tmp_path / "mirror.properties"
    path.write_text("# two data centres\nclusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nA->B.enabled = true\n")
    assert [flow.name for flow in load(str(path)).flows] == ["A->B"]


def test_load_reports_an_unreadable_file(tmp_path):
    with pytest.raises(MirrorConfigError, match="Cannot read mirror config file"):
        load(str(tmp_path / "missing.properties"))
