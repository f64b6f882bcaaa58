"""One way to print a table: Rich's ``Table`` in a terminal, plain aligned text everywhere else.

Every table the launcher prints (``train jobs``, ``train sweep-results``, ``train cv``, ``train
ls``, the run summary, the verb list of ``train --help``) goes through :func:`print_table`, or
:func:`format_table` where the text is part of a larger one. Output that is not a terminal (a pipe,
a file, Slurm's log, a test) is plain: the cells of a column padded to one width, two spaces between
columns, no trailing blanks, so ``grep``/``awk``/``cut`` keep working. In a terminal, with ``rich``
installed (``lightning[extra]`` brings it), the same rows are drawn by ``rich.table.Table``, which
wraps long cells to the terminal's width. Standard library only until Rich is wanted.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

Row = Sequence[str]


def format_table(rows: Sequence[Row], header: Row | None = None, align: str = "", indent: int = 0) -> str:
    """``rows`` (and ``header``) as plain aligned text, one line each.

    Args:
        rows: The cells of each row (strings).
        header: Column titles, printed first; None: no header line.
        align: One letter per column, ``l`` (left, the default for missing letters) or ``r`` (right).
        indent: Spaces before every line.

    Returns:
        The lines joined by newlines (no trailing blanks on any line; no final newline).
    """
    lines = [list(map(str, r)) for r in ([header] if header is not None else []) + list(rows)]
    if not lines:
        return ""
    columns = max(len(line) for line in lines)
    widths = [max((len(line[i]) for line in lines if i < len(line)), default=0) for i in range(columns)]
    out = []
    for line in lines:
        cells = [
            cell.rjust(w) if align[i : i + 1] == "r" else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths))
        ]
        out.append((" " * indent + "  ".join(cells)).rstrip())
    return "\n".join(out)


def rich_wanted(file: IO[str] | None = None) -> bool:
    """Whether ``file`` (default stdout) is a terminal and ``rich`` can be imported."""
    stream = sys.stdout if file is None else file
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def print_table(
    rows: Sequence[Row],
    header: Row | None = None,
    align: str = "",
    indent: int = 0,
    title: str | None = None,
    file: IO[str] | None = None,
) -> None:
    """Print ``rows`` as a table: Rich's in a terminal (:func:`rich_wanted`), else :func:`format_table`'s text.

    Args:
        rows: The cells of each row (strings).
        header: Column titles; None: no header.
        align: One letter per column, ``l`` or ``r``.
        indent: Spaces before every line of the plain text.
        title: A line printed above the table; None: none.
        file: Where to print; default stdout.
    """
    stream = sys.stdout if file is None else file
    if rich_wanted(stream):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        table = Table(
            title=title,
            show_header=header is not None,
            box=box.SIMPLE_HEAD if header is not None else None,
            pad_edge=False,
            padding=(0, 1),
            title_justify="left",
        )
        columns = max([len(header or [])] + [len(r) for r in rows])
        for i in range(columns):
            name = header[i] if header is not None and i < len(header) else ""
            table.add_column(name, justify="right" if align[i : i + 1] == "r" else "left", overflow="fold")
        for row in rows:
            table.add_row(*map(str, row))
        Console(file=stream, markup=False, highlight=False).print(table)
        return
    if title:
        print(title, file=stream)
    text = format_table(rows, header, align, indent)
    if text:
        print(text, file=stream)
