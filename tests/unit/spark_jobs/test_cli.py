import pytest

from spark_jobs import bulk_load, export
from spark_jobs.cli import key_values
from spark_jobs.options import OptionError


def test_key_values():
    assert key_values(["a=1", "b=x=y", "c="], "--option") == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(OptionError, match="--producer takes KEY=VALUE, not 'flat'"):
        key_values(["flat"], "--producer")


def test_bad_settings_exit_2_before_spark_starts(capsys):
    assert bulk_load.main(["--bootstrap", "b:9092", "--topic", "t", "--input", "x.csv", "--producer", "flat"]) == 2
    assert "bulk_load: --producer takes KEY=VALUE" in capsys.readouterr().err
    assert export.main(["--bootstrap", "b:9092", "--topic", "t", "--output", "o", "--option", "flat"]) == 2
    assert "export: --option takes KEY=VALUE" in capsys.readouterr().err
