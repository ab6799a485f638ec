"""An analysis as a Jupyter cell shows it (``gapscope.Analysis._repr_html_``): an HTML fragment
holding the report's facts, its warnings, the readings (the verdict of each range name shown, or
of each device when no range launched work) and the by-name table, as the HTML report writes them
(gapscope.render.html).

A fragment, not a page: no ``<html>`` or ``<head>``, and its style rules all start with the
fragment's own class, so they never restyle the notebook around it. Text from the trace is
escaped, never markup.
"""

from __future__ import annotations

import html
from typing import Any, TextIO

from gapscope.analysis.result import AnalysisResult
from gapscope.render import sections
from gapscope.render.html import write_header, write_section

#: The fragment's class; every style rule is scoped to it.
ROOT_CLASS = "gapscope-report"

STYLE = f"""
.{ROOT_CLASS} {{ font-variant-numeric: tabular-nums; }}
.{ROOT_CLASS} .facts, .{ROOT_CLASS} .note {{ color: #5a5a5a; font-size: 90%; }}
.{ROOT_CLASS} .warning {{ background: #fff4e0; border-left: 4px solid #e69f00; padding: 4px 10px; }}
.{ROOT_CLASS} table {{ border-collapse: collapse; }}
.{ROOT_CLASS} th, .{ROOT_CLASS} td {{ padding: 2px 8px; text-align: left; vertical-align: top; }}
.{ROOT_CLASS} .num {{ text-align: right; white-space: nowrap; }}
.{ROOT_CLASS} .bound {{ color: #b3261e; font-weight: 600; }}
.{ROOT_CLASS} .some {{ color: #8a5a00; }}
.{ROOT_CLASS} .fine {{ color: #1e7b34; }}
"""


def render(result: AnalysisResult, file: TextIO, *, limit: int = 20, **_: Any) -> None:
    """Write the fragment: the header and readings, then the ``limit`` range names with the most
    gap time (gapscope.render.sections.by_name)."""
    name = html.escape(str(result.trace.get("name") or "result"), quote=True)
    file.write(f'<div class="{ROOT_CLASS}">\n<style>{STYLE}</style>\n<h3>gapscope: <code>{name}</code></h3>\n')
    write_header(file, result, 4, limit=limit)
    write_section(file, sections.by_name(result, limit), 4)
    file.write("</div>\n")

