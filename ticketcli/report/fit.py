"""Tables that lose nothing in a narrow terminal or a CI log.

Rich gives every table the console's width and, when the columns do not fit, narrows them until numbers and names
end in an ellipsis (`+0.0…`, `stat…`). Every table the CLI prints goes through `fitted` instead (the console's
`print` calls it), which never cuts a word:

1. a table whose widest text fits is printed as it is;
2. otherwise each column is narrowed, the widest first, but never below its longest word: text wraps between
   words, numbers and names stay whole (the outer border is dropped if that is what makes the words fit);
3. a table whose longest words do not fit side by side is wrapped: its columns go into several tables, each with
   the first (the row labels) again;
4. a row label and one column that still do not fit are stacked: one `header: value` line per cell, which the
   terminal wraps as it wraps any long line.

A new table needs nothing more: build a `rich.table.Table` (a value as one cell, its words separated by spaces
where it may wrap: `91.20% ± 0.35`) and print it with `console.stdout().print(table)`. Keep numbers, names and
hashes as single words and never shorten them; a very long one (a 64-digit hash) is best a row of its own. A
renderable that is not printed as a table (a progress display's grid) calls `narrowed` itself. What is checked:
tests/test_tables_80.py runs every command at 80 columns (a new command must be added there) and
tests/test_narrow_tables.py random tables at any width.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text


def fitted(console: Console, table: Table) -> list[RenderableType]:
    """What to print instead of `table` at the console's width: the table, narrowed, wrapped or stacked."""
    columns = table.columns
    if not columns or narrowed(console, table):
        return [table]
    width = console.width
    shortest = [_extent(console, column)[0] for column in columns]
    groups = _groups(table, shortest, width)
    if len(groups) > 1 and all(_fits(table, shortest, group, width) for group in groups):
        return [
            part
            for n, group in enumerate(groups, 1)
            for part in fitted(console, _part(table, [0, *group], f"part {n} of {len(groups)}"))
        ]
    return _stacked(table)


def narrowed(console: Console, table: Table, first: Sequence[int] = ()) -> bool:
    """Whether `table` fits the console's width as it is or once narrowed (steps 1 and 2 above: its columns given
    widths that keep every word whole, its outer border dropped if need be); False leaves it as it was. Any
    Rich table can be passed, a progress display's grid included; the columns in `first` (a progress bar) give way
    before any other."""
    columns = table.columns
    extents = [_extent(console, column) for column in columns]
    shortest = [lo for lo, _ in extents]  # the longest word: a column never narrower than this
    longest = [hi for _, hi in extents]
    width = console.width
    room = width - _chrome(table, len(columns))
    if sum(longest) <= room:
        return True
    if sum(shortest) > room and table.box is not None and (table.show_edge or table.pad_edge):
        # without its outer border and edge padding the table may fit (a 64-digit hash beside its label at 80)
        slim = width - _chrome(table, len(columns), edge=False)
        if sum(shortest) <= slim:
            table.show_edge = table.pad_edge = False
            room = slim
    if sum(shortest) > room:
        return False
    for column, w, hi in zip(columns, _narrowed(longest, shortest, room, first), longest, strict=True):
        column.width, column.overflow = w, "fold"  # fold: only a word longer than w, which none is
        column.no_wrap = column.no_wrap and w >= hi  # a narrowed column wraps between words rather than crop
    return True


def _extent(console: Console, column: Column) -> tuple[int, int]:
    """The narrowest and widest a column can be without cutting a word: its longest word (header included) and its
    longest line, within the column's own minimum and maximum widths."""
    sizes = [_measure(console, c) for c in [column.header, *column.cells]]
    lo, hi = max(lo for lo, _ in sizes), max(hi for _, hi in sizes)
    if column.max_width is not None:
        hi = max(lo, min(hi, column.max_width))
    if column.min_width is not None:
        lo, hi = max(lo, column.min_width), max(hi, column.min_width)
    return lo, hi


def _measure(console: Console, cell: RenderableType) -> tuple[int, int]:
    m = Measurement.get(console, console.options, cell)
    return m.minimum, m.maximum


def _chrome(table: Table, n: int, edge: bool | None = None) -> int:
    """The width a table of n columns spends on borders and padding (`edge`: with its outer border and edge
    padding, or without; the table's own setting when None), counted as Rich lays it out."""
    box = table.box is not None
    edges = 2 if box and (table.show_edge if edge is None else edge) else 0
    separators = n - 1 if box else 0
    _, right, _, left = table.padding
    pad_edge = table.pad_edge if edge is None else edge
    inner = max(0, left - right) if table.collapse_padding else left  # a column's left padding after the first
    padding = (left if pad_edge else 0) + (n - 1) * (inner + right) + (right if pad_edge else 0) if n else 0
    return edges + separators + padding


def _narrowed(longest: list[int], shortest: list[int], room: int, first: Sequence[int] = ()) -> list[int]:
    """Column widths summing to at most `room`: the columns in `first` lose characters first, then the widest
    column loses a character at a time; none goes below its longest word."""
    widths = list(longest)
    excess = sum(widths) - room
    for j in first:
        give = min(excess, widths[j] - shortest[j])
        if give > 0:
            widths[j] -= give
            excess -= give
    while excess > 0:
        narrowable = [j for j in range(len(widths)) if widths[j] > shortest[j]]
        if not narrowable:
            break
        widths[max(narrowable, key=lambda j: widths[j])] -= 1
        excess -= 1
    return widths


def _fits(table: Table, shortest: list[int], group: list[int], width: int) -> bool:
    """Whether the first column and `group`'s columns fit side by side without cutting a word."""
    return shortest[0] + sum(shortest[j] for j in group) + _chrome(table, len(group) + 1) <= width


def _groups(table: Table, shortest: list[int], width: int) -> list[list[int]]:
    """The columns after the first, in order, in groups that fit beside the first column (a column that fits
    nowhere is a group of its own)."""
    groups: list[list[int]] = []
    for i in range(1, len(shortest)):
        if groups and _fits(table, shortest, [*groups[-1], i], width):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _part(table: Table, indices: list[int], label: str) -> Table:
    """A table of some of `table`'s columns, rows in the same order."""
    title = table.title
    part = Table(
        title=f"{title} ({label})" if isinstance(title, str) and title else label,
        box=table.box,
        show_edge=table.show_edge,
        show_header=table.show_header,
        padding=table.padding,
        pad_edge=table.pad_edge,
        collapse_padding=table.collapse_padding,
    )
    for i in indices:  # add_column, not columns.append: Rich lays out a column by the index add_column gives it
        c = table.columns[i]
        part.add_column(
            c.header,
            justify=c.justify,
            style=c.style,
            header_style=c.header_style,
            no_wrap=c.no_wrap,
            overflow=c.overflow,
            min_width=c.min_width,
        )
    rows = [list(column.cells) for column in (table.columns[i] for i in indices)]
    for row in zip(*rows, strict=True):
        part.add_row(*row)
    return part


def _stacked(table: Table) -> list[RenderableType]:
    """The table as lines: the title, then each row as `label: value` (two columns, after the same line of the
    headers) or `first header: label` followed by one indented `header: value` line per further column. Nothing
    is cut: a long line wraps in the terminal."""
    lines: list[RenderableType] = []  # strings: the console shows them literally, as it shows table cells
    if isinstance(table.title, str) and table.title:
        lines.append(table.title)
    headers = [_plain(c.header) for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    if len(headers) == 2 and table.show_header:
        lines.append(f"{headers[0]}: {headers[1]}")
    for row in zip(*columns, strict=True):
        values = [_plain(v) for v in row]
        if len(values) == 2:
            lines.append(f"{values[0]}: {values[1]}")
            continue
        lines.append(f"{headers[0]}: {values[0]}")
        lines.extend(f"  {h}: {v}" for h, v in zip(headers[1:], values[1:], strict=True) if v)
    return lines


def _plain(cell: RenderableType) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)
