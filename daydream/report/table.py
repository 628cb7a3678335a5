"""Tables whose numbers are never cut: at 80 columns, or piped into a CI log, a figure keeps all its
characters and the text columns beside it (names, critical-path summaries) wrap instead.

    from daydream.report.table import Table   # rich's Table, with that one rule
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table as RichTable
from rich.text import Text

#: A cell that is a figure: digits with units, signs, separators and the ×, →, % a table writes.
FIGURE = re.compile(r"^[-+−~≥≤<>]?\s?[\d.,]+\s?(?:[%x×]|[a-zA-Zµ]{1,4}(?:/s)?)?"
                    r"(?:\s?(?:→|->|/)\s?[-+]?[\d.,]+\s?(?:[%x×]|[a-zA-Zµ]{1,4}(?:/s)?)?)?"
                    r"(?:\s\([^()]{0,16}\))?$")
#: The widest figure kept whole; anything longer may be folded like text.
WIDEST = 24


class Table(RichTable):
    """rich's Table whose columns of figures never shrink below their widest figure or their header
    (nor wrap), and whose columns of text wrap where the width runs out, rather than being cut."""

    @classmethod
    def grid(cls, *headers: Any, **options: Any) -> Table:
        table = super().grid(*headers, **options)
        assert isinstance(table, Table)  # rich builds it with cls
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for column in self.columns:
            cells = [_plain(cell) for cell in column._cells]
            figures = [cell for cell in cells if cell.strip() and cell.strip() not in ("—", "-")]
            if figures and all(FIGURE.match(cell.strip()) for cell in figures):
                widest = max(len(cell) for cell in [*figures, _plain(column.header)])
                if widest <= WIDEST:
                    column.no_wrap = True
                    column.min_width = max(column.min_width or 0, widest)
                    continue
            column.no_wrap = False
            column.overflow = "fold"
        yield from super().__rich_console__(console, options)


def _plain(cell: Any) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain if "[" in cell else cell
    return ""


def labelled(rows: Iterable[tuple[str, Any]]) -> Table:
    """A grid of (label, text) rows: the label bold, the text folded to the width (notes, facts)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, text in rows:
        grid.add_row(label, text)
    return grid


def named_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A table of named rows (layers, kernels) across the width: the
    name cut with an ellipsis, figures right."""
    table = Table(title=title, title_justify="left", expand=True)
    table.add_column(headers[0], ratio=1, overflow="ellipsis", no_wrap=True)
    for header in headers[1:]:
        table.add_column(header, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table
