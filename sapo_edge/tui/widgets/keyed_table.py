"""A DataTable redrawn by difference: rows and columns keyed, a cell updated only when its text
or style changed, fixed column widths (a DataTable measures every cell it is given: a class of
256 members took 0.3-0.9 s of the UI thread per redraw when rebuilt every second)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable


def same(a: Any, b: Any) -> bool:
    """The same cell on screen (Text compares by identity: compare its text and style)."""
    if a is b:
        return True
    if isinstance(a, Text) and isinstance(b, Text):
        return a.plain == b.plain and a.style == b.style and a.spans == b.spans
    return type(a) is type(b) and a == b


def width_of(cell: Any) -> int:
    return cell_len(cell.plain if isinstance(cell, Text) else str(cell))


class KeyedTable(DataTable):
    """show_rows() puts rows (key -> cells) under columns (key -> label): what changed is
    updated in place, a new row is added (and the rows sorted into the order given), a gone one
    removed; the table is rebuilt only when the columns change or a column must widen."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._columns: dict[str, Any] = {}  # column key -> label, as laid out
        self._widths: list[int] = []
        self._shown: dict[str, list[Any]] = {}  # row key -> its cells, in table order
        self._given: dict[str, list[Any]] = {}  # row key -> the list it was last given
        self.rebuilds = 0  # full rebuilds (the tests count them)

    def show_rows(
        self,
        columns: dict[str, Any],
        rows: dict[str, list[Any]],
        least: dict[str, int] | None = None,
    ) -> None:
        """`least`: a column's width at the least (the widest its cells can be, for a column
        whose width would otherwise move with every redraw: another rebuild each time)."""
        least = least or {}
        widths = [max(width_of(label), least.get(k, 0)) for k, label in columns.items()]
        kept = list(columns) == list(self._columns)
        if kept:  # a row given the same list as last time is as shown: measured then
            widths = [max(w, had) for w, had in zip(widths, self._widths, strict=True)]
        for key, cells in rows.items():
            had = self._given.get(key) if kept else None
            if had is cells:
                continue
            for i, c in enumerate(cells):  # only cells it was not given last time
                if had is None or had[i] is not c:
                    widths[i] = max(widths[i], width_of(c))
        if (
            list(columns) != list(self._columns)
            or any(
                not same(a, b)
                for a, b in zip(columns.values(), self._columns.values(), strict=True)
            )
            or any(w > had for w, had in zip(widths, self._widths, strict=True))
        ):
            self._rebuild(columns, widths, rows)
            return
        for gone in [k for k in self._shown if k not in rows]:
            self.remove_row(gone)
            del self._shown[gone]
            self._given.pop(gone, None)
        for key, cells in rows.items():
            had = self._shown.get(key)
            if had is not None and self._given.get(key) is cells:
                continue
            self._given[key] = cells
            if had is None:
                self.add_row(*cells, key=key)
                self._shown[key] = list(cells)
                continue
            for i, (column, old, new) in enumerate(zip(columns, had, cells, strict=True)):
                if not same(old, new):
                    self.update_cell(key, column, new)
                    had[i] = new
        if list(self._shown) != list(rows):  # a newcomer's row goes where it belongs
            where = {id(self._shown[k][0]): i for i, k in enumerate(rows)}
            self.sort(key=lambda values: where[id(values[0])])
            self._shown = {k: self._shown[k] for k in rows}

    def _update_dimensions(self, new_rows: Any) -> None:
        """Every column has a fixed width here: nothing to measure (DataTable measures each
        cell of every new row: 2,800 cells for a class of 256), only the size to set."""
        super()._update_dimensions(())

    def _rebuild(self, columns: dict[str, Any], widths: list[int], rows: dict[str, list]) -> None:
        self.rebuilds += 1
        self.clear(columns=True)
        for (key, label), w in zip(columns.items(), widths, strict=True):
            self.add_column(label, width=w, key=key)
        for key, cells in rows.items():
            self.add_row(*cells, key=key)
        self._columns, self._widths = dict(columns), widths
        self._shown = {k: list(cells) for k, cells in rows.items()}
        self._given = dict(rows)
