"""How a report table fits a terminal width: which columns show, under which header, how wide.

Each :class:`Column` of a report section (gapscope.render.sections) has a priority (0: always shown; the
highest number is left out first) and may have a short header. :func:`fit_columns` tries, in
order, until the table fits the width:

1. every column under its full header, names and text at full length;
2. short headers (the table's note then spells them out);
3. text that may wrap (a reading) onto WRAP_LINES lines, names shortened in the middle with an
   ellipsis down to NAME_MIN characters;
4. leaving columns out, highest priority number first (the rightmost first among equals).

A number is never cut: a number column is always as wide as its widest cell. If the columns
that must show still do not fit, names go down to NAME_FLOOR and the table is wider than asked.
``width=None`` is the full table: every column, full headers, whole names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

#: Characters between two columns (rich: one padding space each side, collapsed, and the box's).
SEPARATOR = 2
#: Names are shortened to no fewer characters than this while columns can still be left out ...
NAME_MIN = 16
#: ... and to this when only the columns that always show are left.
NAME_FLOOR = 8
ELLIPSIS = "…"


@dataclass(frozen=True)
class Column:
    """A column: its header, whether its cells are numbers (right-aligned, never cut), its
    priority on a narrow terminal (0: always shown; higher: left out sooner), a short header,
    and whether its text may wrap at spaces (a reading)."""

    header: str
    number: bool = True
    priority: int = 0
    short: str | None = None
    wrap: bool = False


@dataclass(frozen=True)
class Layout:
    """The columns shown (indices into the section's columns), each one's header and width, the
    columns left out and the short headers used."""

    shown: tuple[int, ...]
    headers: tuple[str, ...]
    widths: tuple[int, ...]
    hidden: tuple[str, ...]
    abbreviated: tuple[tuple[str, str], ...]  # (short, full)

    @property
    def width(self) -> int:
        """The table's width in characters."""
        return sum(self.widths) + SEPARATOR * max(len(self.widths) - 1, 0)

    def note(self) -> str | None:
        """One line spelling out the short headers and naming the columns left out."""
        parts = [", ".join(f"{s} = {f}" for s, f in self.abbreviated)] if self.abbreviated else []
        if self.hidden:
            parts.append(f"not shown: {', '.join(self.hidden)} (--wide shows them)")
        return "; ".join(parts) or None


def middle_ellipsis(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle replaced by an ellipsis."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = (width - 1 + 1) // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


#: Where a name's distinct part may start: just after one of these, the first group first
#: (``(blocks.3.`` starts at ``blocks``, not at ``3``).
_SEPARATORS = (" ([<,", ".:/_-")


def _around(text: str, width: int, differs: int) -> str:
    """``text`` in ``width`` characters showing where it differs from names that shorten alike:
    its first characters, an ellipsis, then the word holding position ``differs`` onwards (and
    an ellipsis if that is cut too)."""
    head = max(1, width // 3)
    room = width - head - 1  # after the first ellipsis
    if differs <= head or room < 3:
        return text[:width - 1] + ELLIPSIS
    lo = max(head, differs - 2 * room // 3)
    start = lo  # where the word holding the difference starts, if it starts near enough
    for marks in _SEPARATORS:
        at = max(text.rfind(c, lo - 1, differs) for c in marks)
        if at >= 0:
            start = at + 1
            break
    start = min(start, max(head, len(text) - room))  # fill the width when the rest is short
    rest = text[start:]
    return text[:head] + ELLIPSIS + (rest if len(rest) <= room else rest[:room - 1] + ELLIPSIS)


def shorten_names(names: Sequence[str], width: int) -> list[str]:
    """Each name in at most ``width`` characters, its middle replaced by an ellipsis, except
    where that makes different names look the same (``FSDP::pre_…ed_module)`` for every block
    of a model): those show where they differ (``FSDP::p…blocks.3._che…``)."""
    cut = {n: middle_ellipsis(n, width) for n in dict.fromkeys(names)}  # each distinct name once
    groups: dict[str, list[str]] = {}
    for n, s in cut.items():
        groups.setdefault(s, []).append(n)
    for alike in groups.values():
        if len(alike) < 2:
            continue
        differs = len(os.path.commonprefix(alike))
        redone = {n: _around(n, width, differs) if len(n) > width else n for n in alike}
        if len(set(redone.values())) > 1:  # else (they differ only far apart) as they were
            cut.update(redone)
    return [cut[n] for n in names]


#: Wrapped text (a reading) is squeezed no further than onto this many lines.
WRAP_LINES = 3


def _lines_at(text: str, width: int) -> int:
    """How many lines ``text`` takes wrapped at spaces into ``width`` (greedy, as rich wraps)."""
    lines, used = 1, 0
    for word in text.split():
        if used == 0:
            used = len(word)
        elif used + 1 + len(word) <= width:
            used += 1 + len(word)
        else:
            lines, used = lines + 1, len(word)
    return lines


def _wrapped_width(texts: Sequence[str], lines: int = WRAP_LINES) -> int:
    """The narrowest width at which every text wraps at spaces onto at most ``lines`` lines
    (never narrower than its longest word)."""
    distinct = set(texts)
    width = max((len(w) for t in distinct for w in t.split()), default=0)
    while any(_lines_at(t, width) > lines for t in distinct):
        width += 1
    return width


def _share_room(ws: list[int], wanted: list[int], room: int) -> list[int]:
    """Widths ``ws`` grown towards ``wanted`` by ``room`` characters in all, evenly: the
    narrowest of the columns that still want more grows first (water filling), so two shortened
    names end up equally wide, or one whole and the other given the rest; leftover characters
    go to the leftmost columns."""
    ws = list(ws)
    while room > 0:
        growing = [j for j in range(len(ws)) if ws[j] < wanted[j]]
        if not growing:
            break
        low = min(ws[j] for j in growing)
        level = [j for j in growing if ws[j] == low]
        # Raise the narrowest to the next width up (another column's, or one's full length).
        higher = [ws[j] for j in growing if ws[j] > low] + [wanted[j] for j in level]
        step = min(min(higher) - low, room // len(level)) if room >= len(level) else 0
        if step == 0:  # fewer characters left than columns at this width: one each, leftmost first
            for j in level[:room]:
                ws[j] += 1
            break
        for j in level:
            ws[j] += step
        room -= step * len(level)
    return ws


def fit_columns(specs: Sequence[Column], cells: Sequence[Sequence[str]], width: int | None,
                names: frozenset[int] = frozenset()) -> Layout:
    """The layout of a table of ``cells`` (rows of strings, one per column) in ``width``
    characters (None: the full table); ``names``: the columns holding names from the trace,
    which may be shortened in the middle."""
    n = len(specs)
    cols = [[row[i] for row in cells] for i in range(n)]
    longest = [max((len(c) for c in col), default=0) for col in cols]

    def widths(shown: list[int], short: bool, squeeze: int | None) -> list[int]:
        out = []
        for i in shown:
            s = specs[i]
            head = len(s.short) if short and s.short else len(s.header)
            body = longest[i]
            if squeeze is not None and i in names:
                body = min(body, squeeze)
            elif squeeze is not None and s.wrap:
                body = _wrapped_width(cols[i])
            out.append(max(head, body))
        return out

    def total(ws: list[int]) -> int:
        return sum(ws) + SEPARATOR * max(len(ws) - 1, 0)

    shown = list(range(n))
    short = squeeze = None
    if width is not None:
        for short, squeeze in ((False, None), (True, None), (True, NAME_MIN)):
            if total(widths(shown, short, squeeze)) <= width:
                break
        else:
            droppable = sorted((i for i in range(n) if specs[i].priority > 0),
                               key=lambda i: (-specs[i].priority, -i))
            for i in droppable:
                shown.remove(i)
                if total(widths(shown, True, NAME_MIN)) <= width:
                    break
            else:
                squeeze = NAME_FLOOR
    ws = widths(shown, bool(short), squeeze)
    if width is not None and squeeze is not None:
        # The room left goes to the names first (a cut name loses its middle), then to the text
        # that wraps (it only takes more lines), each up to its full length.
        for kind in (lambda i: i in names, lambda i: specs[i].wrap and i not in names):
            ws = _share_room(ws, [max(longest[i], len(specs[i].header)) if kind(i) else ws[j]
                                  for j, i in enumerate(shown)], width - total(ws))
    headers = tuple(specs[i].short if short and specs[i].short else specs[i].header for i in shown)
    abbreviated = tuple((specs[i].short, specs[i].header) for i in shown
                        if short and specs[i].short and specs[i].short != specs[i].header)
    hidden = tuple(specs[i].header for i in range(n) if i not in shown)
    return Layout(tuple(shown), headers, tuple(ws), hidden, abbreviated)
