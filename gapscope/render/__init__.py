"""Renderers chosen by name: each output format of each kind of result is one module of this
package with one function, ``render(result, file, **options)``, that writes to ``file``.

    from gapscope.render import render
    render(result, "table", sys.stdout, limit=20)

Kinds: ``analysis`` (AnalysisResult), ``fleet`` (FleetResult), ``comparison`` (Comparison),
``run`` (RunResult), ``timeline`` (gapscope.analysis.pipeline.AnalysisArrays: the arrays behind a
result, for the Perfetto export, which needs every kernel and gap), ``document``
(gapscope.render.document.Document: a report on one trace or several, with its figures),
``tables`` (gapscope.analysis.tables.ActivityTables: every gap and every activity, as DataFrames).
Modules are imported only when used, so choosing a renderer is cheap. One format writes a folder
rather than a file: ``parquet`` (a table per file), whose ``file`` is the folder's path.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, TextIO

from gapscope.errors import GapscopeError

#: (kind, format) -> module of gapscope.render holding its ``render``.
RENDERERS: dict[tuple[str, str], str] = {
    ("analysis", "table"): "table",
    ("analysis", "json"): "json",
    ("analysis", "csv"): "csv",
    ("analysis", "markdown"): "markdown",
    ("analysis", "html"): "html",
    ("analysis", "notebook"): "notebook",
    ("fleet", "table"): "fleet_table",
    ("fleet", "json"): "json",
    ("fleet", "csv"): "fleet_csv",
    ("comparison", "table"): "comparison_table",
    ("comparison", "json"): "json",
    ("comparison", "markdown"): "comparison_markdown",
    ("comparison", "junit"): "junit",
    ("run", "table"): "run_table",
    ("run", "json"): "json",
    ("run", "markdown"): "run_markdown",
    ("document", "markdown"): "markdown",
    ("document", "html"): "html",
    ("timeline", "perfetto"): "perfetto",
    ("tables", "parquet"): "parquet",
    ("tables", "gaps-csv"): "gaps_csv",
}

_KINDS = {"AnalysisResult": "analysis", "FleetResult": "fleet", "Comparison": "comparison",
          "RunResult": "run", "AnalysisArrays": "timeline",
          "Document": "document", "ActivityTables": "tables"}


def kind_of(result: Any) -> str:
    """The kind of a result object (``analysis``, ``fleet``, ``comparison``, ``run``, ``timeline``,
    ``document``, ``tables``)."""
    try:
        return _KINDS[type(result).__name__]
    except KeyError:
        raise TypeError(f"no renderer takes a {type(result).__name__}") from None


def formats(kind: str) -> tuple[str, ...]:
    """The formats a kind of result renders to, in registry order."""
    return tuple(f for k, f in RENDERERS if k == kind)


def render(result: Any, fmt: str, file: TextIO | str | Path, **options: Any) -> None:
    """Write ``result`` in format ``fmt`` to ``file`` (a text file; a folder's path for
    ``parquet``); options go to that format's renderer, which ignores the ones it does not use."""
    kind = kind_of(result)
    try:
        module = RENDERERS[(kind, fmt)]
    except KeyError:
        raise GapscopeError(f"a {kind} result has no {fmt!r} format (it has: {', '.join(formats(kind))})") from None
    if kind == "analysis" and module != "json":  # the JSON writes rows a slice at a time
        from gapscope.render.sections import READ_AGAIN

        result = result.listed(READ_AGAIN)
    importlib.import_module(f"gapscope.render.{module}").render(result, file, **options)
