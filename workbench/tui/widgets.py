"""The cockpit's text widgets: Textual's own, except that a ``str`` they are given is shown as it is.

Textual reads a ``str`` handed to ``Static``, ``Label``, a ``DataTable`` cell, a ``Tree`` label or an
``OptionList`` prompt as content markup, so evidence holding ``[/]`` crashes the cockpit and
``[rank5]:`` vanishes from the line. Screens and forms import these classes instead of Textual's
(``tests/reliability/test_cockpit_markup.py`` fails on a module of ``workbench/tui`` that imports one of
Textual's own), so a new screen shows evidence verbatim without having to remember it. Styled text
is still possible: pass a Rich ``Text``.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text, TextType
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Label, OptionList, Static, Tree
from textual.widgets.data_table import CellType, ColumnKey, RowKey

from workbench.tui.text import plain

__all__ = ["PlainLabel", "PlainOptionList", "PlainStatic", "PlainTable", "PlainTree"]


def _cell(value: CellType) -> CellType:
    """A ``str`` cell as plain text, unwrapped as the table shows a ``str`` in a one-line row;
    anything else as it is."""
    if not isinstance(value, str):
        return value
    text = plain(value)
    text.no_wrap = True
    return text


def _label(value: TextType) -> Text:
    return plain(value) if isinstance(value, str) else value


class PlainStatic(Static):
    """``Static`` whose ``str`` content is plain text (newlines kept), never markup."""

    def __init__(self, content: Any = "", **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(content, **kwargs)


class PlainLabel(Label):
    """``Label`` whose ``str`` content is plain text, never markup."""

    def __init__(self, content: Any = "", **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(content, **kwargs)


class PlainTable(DataTable):
    """``DataTable`` whose ``str`` cells, row labels and column labels are plain text."""

    def add_column(self, label: TextType, *, width: int | None = None, key: str | None = None,
                   default: CellType | None = None) -> ColumnKey:
        return super().add_column(_label(label), width=width, key=key,
                                  default=None if default is None else _cell(default))

    def add_row(self, *cells: CellType, height: int | None = 1, key: str | None = None,
                label: TextType | None = None) -> RowKey:
        return super().add_row(*(_cell(c) for c in cells), height=height, key=key,
                               label=None if label is None else _label(label))

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: CellType, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, _cell(value), update_width=update_width)

    def update_cell_at(self, coordinate: Coordinate, value: CellType, *, update_width: bool = False) -> None:
        super().update_cell_at(coordinate, _cell(value), update_width=update_width)


class PlainTree(Tree):
    """``Tree`` whose ``str`` node labels are plain text."""

    def process_label(self, label: TextType) -> Text:
        return super().process_label(_label(label))


class PlainOptionList(OptionList):
    """``OptionList`` whose ``str`` prompts are plain text."""

    def __init__(self, *content: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(*content, **kwargs)
