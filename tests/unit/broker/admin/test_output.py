import io

from broker.admin.output import Progress, pretty_table, table


def test_table_columns_are_as_wide_as_their_widest_cell():
    assert table(["A", "BB"], [["xxx", 1], [None, 22]]).splitlines() == ["A   BB", "xxx 1", "-   22"]


def test_pretty_table_follows_every_column_with_a_tab_as_kafka_tools_do():
    assert pretty_table(["Id", "State"], [["7", "Ongoing"]]) == "Id\tState  \t\n7 \tOngoing\t"


def test_progress_writes_lines_when_not_on_a_terminal():
    out = io.StringIO()
    progress = Progress("Reassigning partitions", 4, out)
    progress.update(1, "done")
    progress.finish()
    assert out.getvalue() == "Reassigning partitions: 1/4 done\n"
