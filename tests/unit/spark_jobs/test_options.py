"""Option parsing of the logway data source: Spark's Kafka source names, precedence, checks."""

import pytest

from spark_jobs.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    Subscription,
    client_config,
    offsets_to_json,
    parse_partition_map,
    parse_read_options,
    parse_write_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_defaults_are_those_of_sparks_kafka_source():
    options = parse_read_options(BASE)
    assert options.bootstrap_servers == "127.0.0.1:9092"
    assert options.subscription == Subscription("subscribe", topics=("t",))
    assert options.starting == OffsetSpec("earliest")
    assert options.ending == OffsetSpec("latest")
    assert options.fail_on_data_loss and not options.include_headers
    assert options.isolation_level == "read_uncommitted"
    assert options.min_partitions is None and not options.offline
    stream = parse_read_options(BASE, streaming=True)
    assert stream.starting == OffsetSpec("latest")


def test_option_names_are_case_insensitive_and_plain_bootstrap_servers_is_accepted():
    options = parse_read_options(
        {"Bootstrap.Servers": "h:1", "SUBSCRIBE": "a, b,,", "includeheaders": "TRUE", "MinPartitions": "8"}
    )
    assert options.bootstrap_servers == "h:1"
    assert options.subscription.topics == ("a", "b")
    assert options.include_headers and options.min_partitions == 8


@pytest.mark.parametrize(
    "given",
    [{}, {"subscribe": "t", "assign": '{"t":[0]}'}, {"subscribe": "t", "subscribePattern": "t.*"}],
)
def test_exactly_one_subscription_option(given):
    with pytest.raises(OptionError, match="exactly one of"):
        parse_read_options({"kafka.bootstrap.servers": "h:1", **given})


def test_assign_and_pattern():
    options = parse_read_options({"bootstrap.servers": "h:1", "assign": '{"a":[0,2],"b":[1]}'})
    assert options.subscription.partitions == (("a", 0), ("a", 2), ("b", 1))
    for bad in ('["a"]', '{"a":[-1]}', '{"a":"0"}', "{}", "not json"):
        with pytest.raises(OptionError):
            parse_read_options({"bootstrap.servers": "h:1", "assign": bad})
    with pytest.raises(OptionError, match="not a regular expression"):
        parse_read_options({"bootstrap.servers": "h:1", "subscribePattern": "("})


def test_bootstrap_servers_needed_unless_offline():
    with pytest.raises(OptionError, match="bootstrap"):
        parse_read_options({"subscribe": "t"})
    options = parse_read_options({"subscribe": "t", "logDirs": "/d1, /d2"})
    assert options.offline and options.log_dirs == ("/d1", "/d2")


def test_offsets_json_and_what_a_batch_read_refuses():
    options = parse_read_options(
        {**BASE, "startingOffsets": '{"t":{"0":5,"1":-2}}', "endingOffsets": '{"t":{"0":-1,"1":9}}'}
    )
    assert options.starting == OffsetSpec("offsets", offsets=((("t", 0), 5), (("t", 1), EARLIEST)))
    assert options.ending == OffsetSpec("offsets", offsets=((("t", 0), LATEST), (("t", 1), 9)))
    for key, value in [
        ("startingOffsets", "latest"),
        ("endingOffsets", "earliest"),
        ("startingOffsets", '{"t":{"0":-1}}'),
        ("endingOffsets", '{"t":{"0":-2}}'),
        ("startingOffsets", '{"t":{"0":-3}}'),
        ("startingOffsets", '{"t":{"x":1}}'),
        ("startingOffsets", '{"t":{"0":"1"}}'),
        ("startingOffsets", '{"t":[0]}'),
    ]:
        with pytest.raises(OptionError):
            parse_read_options({**BASE, key: value})
    # A stream may start at the latest offsets, but has no ending.
    parse_read_options({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, streaming=True)
    with pytest.raises(OptionError, match="batch reads"):
        parse_read_options({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_timestamps_take_precedence_as_in_spark():
    options = parse_read_options(
        {
            **BASE,
            "startingOffsets": '{"t":{"0":5}}',
            "startingOffsetsByTimestamp": '{"t":{"0":1000}}',
            "startingTimestamp": "2000",
            "endingOffsetsByTimestamp": '{"t":{"0":3000}}',
            "endingOffsets": '{"t":{"0":7}}',
        }
    )
    assert options.starting == OffsetSpec("timestamp", timestamp=2000)
    assert options.ending == OffsetSpec("timestamps", timestamps=((("t", 0), 3000),))
    with pytest.raises(OptionError, match="milliseconds"):
        parse_read_options({**BASE, "startingTimestamp": "yesterday"})
    with pytest.raises(OptionError, match="error or latest"):
        parse_read_options({**BASE, "startingOffsetsByTimestampStrategy": "earliest"})


@pytest.mark.parametrize(
    "key, value",
    [
        ("failOnDataLoss", "maybe"),
        ("minPartitions", "0"),
        ("minPartitions", "x"),
        ("maxRecordsPerPartition", "-5"),
        ("kafka.isolation.level", "serializable"),
        ("kafkaConsumer.pollTimeoutMs", "0"),
    ],
)
def test_bad_values(key, value):
    with pytest.raises(OptionError):
        parse_read_options({**BASE, key: value})


def test_client_settings_pass_through_except_those_the_source_manages():
    options = parse_read_options(
        {**BASE, "kafka.security.protocol": "SSL", "kafka.isolation.level": "read_committed", "kafka.group.id": "g"}
    )
    assert options.client_config == (("security.protocol", "SSL"),)
    assert options.read_committed
    for managed in ("auto.offset.reset", "enable.auto.commit", "value.deserializer"):
        with pytest.raises(OptionError, match="managed"):
            client_config({f"kafka.{managed}": "x"})


def test_write_options():
    options = parse_write_options({"kafka.bootstrap.servers": "h:1", "topic": " out ", "kafka.linger.ms": "5"})
    assert (options.topic, options.client_config) == ("out", (("linger.ms", "5"),))
    assert parse_write_options({"bootstrap.servers": "h:1"}).topic is None
    with pytest.raises(OptionError):
        parse_write_options({"topic": "t"})


def test_write_options_transactions():
    default = parse_write_options({"kafka.bootstrap.servers": "h:1"})
    assert (default.transactional, default.transactional_id_prefix) == (True, "logway-spark")
    options = parse_write_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "Transactional": "FALSE",
            "transactionalIdPrefix": "nightly",
            "kafka.transaction.timeout.ms": "60000",
        }
    )
    assert (options.transactional, options.transactional_id_prefix) == (False, "nightly")
    assert options.client_config == (("transaction.timeout.ms", "60000"),)
    with pytest.raises(OptionError, match="managed"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "mine"})
    with pytest.raises(OptionError, match="true or false"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "transactional": "yes"})
    with pytest.raises(OptionError, match="empty"):
        parse_write_options({"kafka.bootstrap.servers": "h:1", "transactionalIdPrefix": " "})


def test_partition_maps_round_trip():
    text = '{"b":{"1":3},"a":{"10":-2,"2":7}}'
    parsed = parse_partition_map("x", text)
    assert parsed == {("b", 1): 3, ("a", 10): -2, ("a", 2): 7}
    assert parse_partition_map("x", offsets_to_json(parsed)) == parsed
    assert offsets_to_json(parsed) == '{"a":{"2":7,"10":-2},"b":{"1":3}}'


def test_subscription_select():
    available = {"a": 2, "b": 1, "ab": 3, "__consumer_offsets": 50}
    assert Subscription("subscribe", topics=("b", "a")).select(available) == [("a", 0), ("a", 1), ("b", 0)]
    assert Subscription("pattern", pattern="a.*").select(available) == [("a", 0), ("a", 1), ("ab", 0), ("ab", 1), ("ab", 2)]
    assert Subscription("pattern", pattern="b").select(available) == [("b", 0)]  # whole names only
    assert Subscription("pattern", pattern=".*").select(available)[-1] == ("b", 0)  # no internal topics
    assert Subscription("assign", partitions=(("ab", 2), ("a", 0))).select(available) == [("a", 0), ("ab", 2)]
    with pytest.raises(OptionError, match="do not exist: c"):
        Subscription("subscribe", topics=("a", "c")).select(available)
    with pytest.raises(OptionError, match="b-1"):
        Subscription("assign", partitions=(("b", 1),)).select(available)


def test_the_tiered_store_is_set_by_the_brokers_rsm_config_keys():
    options = parse_read_options(
        {
            "subscribe": "t",
            "kafka.bootstrap.servers": "b:9092",
            "rsm.config.url": "s3://tier/prefix",
            "rsm.config.endpoint_url": "http://127.0.0.1:9000",
            "rsm.config.key": "k",
        }
    )
    assert options.remote_store_url == "s3://tier/prefix"
    assert options.remote_store_options == (("endpoint_url", "http://127.0.0.1:9000"), ("key", "k"))
    assert ("rsm.config.key", "k") not in options.client_config  # not handed to librdkafka


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"rsm.config.endpoint_url": "http://x"}, "without rsm.config.url"),
        ({"rsm.url": "file:///tier"}, "unknown options rsm.url"),
        ({"rsm.config.url": "file:///tier", "logDirs": "/data"}, "cannot be combined with logDirs"),
    ],
)
def test_tiered_store_options_that_would_not_be_used_are_refused(extra, message):
    with pytest.raises(OptionError, match=message):
        parse_read_options({"subscribe": "t", "kafka.bootstrap.servers": "b:9092", **extra})
