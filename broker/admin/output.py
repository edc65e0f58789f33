"""Output as Kafka's tools print it: tables of left-aligned columns, and a progress line."""

import sys
from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns left-aligned to their widest cell, one space apart (the last one unpadded), as
    kafka-consumer-groups.sh and kafka-transactions.sh print theirs."""
    cells = [list(headers)] + [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths)] + [row[-1]]
        lines.append(" ".join(padded).rstrip())
    return "\n".join(lines)


def ids(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


class Progress:
    """One line on stderr rewritten in place ("\\r") while a long operation runs, ended by a
    newline when done; plain lines when stderr is not a terminal."""

    def __init__(self, what: str, total: int, stream=None) -> None:
        self.what, self.total = what, total
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self._shown = False

    def update(self, done: int, detail: str = "") -> None:
        line = f"{self.what}: {done}/{self.total}" + (f" {detail}" if detail else "")
        if self._tty:
            self.stream.write("\r" + line + "\x1b[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable (kafka-transactions.sh): every column padded to its
    widest cell and followed by a tab."""
    cells = [list(headers)] + [[str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths)) for row in cells)
