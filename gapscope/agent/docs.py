"""The documentation the package ships, read where it is installed: what the MCP server serves
as resources, and the tables its tools quote.

``gapscope/_docs`` is the repository's ``docs/`` folder (a link to it in a checkout, so an
editable install reads the files themselves; the pages of DOCS copied into a wheel as package
data: pyproject.toml). The verdict rules and the trace formats are read from the tables of
metrics.md and formats.md, so they are defined in one place.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

from gapscope.errors import GapscopeError

#: The pages served, by name, with what each defines (their resources' descriptions).
DOCS = {
    "metrics.md": "Every figure and verdict of a gapscope result, defined once: gap fraction, gap "
                  "categories, the CUDA Graph ceiling, verdicts and readings.",
    "schema.md": "The result JSON schemas (gapscope.analysis/2, gapscope.comparison/2, ...): every field.",
    "formats.md": "The trace formats gapscope reads, how each is recorded, and the caches.",
    "ci.md": "gapscope compare: thresholds, verdicts in words, the noise behind the defaults.",
    "agents.md": "The MCP server: registering it with a client, its tools and what they return.",
}
#: The scheme and host of the resources' URIs (``gapscope://docs/metrics.md``).
URI_PREFIX = "gapscope://docs/"


def uri(name: str, anchor: str | None = None) -> str:
    """The resource URI of the page ``name`` (one of DOCS), with an ``#anchor`` if given."""
    return URI_PREFIX + name + (f"#{anchor}" if anchor else "")


def read(name: str) -> str:
    """The text of the shipped page ``name`` (one of DOCS); GapscopeError when it is not there."""
    if name not in DOCS:
        raise GapscopeError(f"{name}: not a page gapscope serves ({', '.join(DOCS)})")
    try:
        return (resources.files("gapscope") / "_docs" / name).read_text(encoding="utf-8")
    except OSError:
        raise GapscopeError(f"docs/{name} is not installed with this gapscope (gapscope/_docs)") from None


def _table(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line ``heading``, header and rule left out."""
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise GapscopeError(f"no section {heading!r} in the shipped docs") from None
    rows: list[list[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
        elif rows:
            break
    return rows[2:]


_CODE = re.compile(r"`([a-z_]+)`")


@functools.lru_cache(maxsize=1)
def verdict_rules() -> dict[str, list[str]]:
    """Each verdict code with its rule, in the order the rules are tried (gapscope.catalog's
    VERDICTS, which metrics.md's "Verdicts" table lists)."""
    from gapscope.catalog import VERDICTS

    return {v.code: [v.rule] for v in VERDICTS}


@functools.lru_cache(maxsize=1)
def trace_formats() -> list[dict[str, Any]]:
    """formats.md's table of the trace formats gapscope reads: for each, ``format`` (the result's
    ``trace.format``), ``what`` it is, ``recorded`` (how it is made) and ``recognised`` (how
    gapscope tells it), as the table words them."""
    return [{"format": fmt.strip("`"), "what": what, "recorded": made, "recognised": known}
            for fmt, what, made, known, _ in _table(read("formats.md"), "# Trace formats")]
