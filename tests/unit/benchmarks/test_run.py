import pytest

from benchmarks.run import ALL_PARTS, ALL_WORKLOADS, parse_args


def test_every_workload_by_default():
    args = parse_args([])

    assert args.parts == list(ALL_PARTS)
    assert args.workloads == list(ALL_WORKLOADS)


def test_workloads_select_one_case():
    args = parse_args(["--parts", "mock,logway", "--workloads", " wire-produce "])

    assert args.parts == ["mock", "logway"]
    assert args.workloads == ["wire-produce"]


def test_unknown_workload_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--workloads", "wire-produce,fetch-everything"])

    assert "unknown workloads: fetch-everything" in capsys.readouterr().err


def test_the_scale_part_takes_ten_thousand_partitions_or_a_thousand_when_quick():
    assert parse_args(["--parts", "scale"]).scale_partitions == 10_000
    assert parse_args(["--parts", "scale", "--quick"]).scale_partitions == 1_000
    assert parse_args(["--parts", "scale", "--scale-partitions", "500"]).scale_partitions == 500
