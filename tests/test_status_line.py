"""The status line of one large trace (gapscope.cli.progress.TraceStatus): which steps the
analysis reports, with the trace's GPU activity rows, and when a line is shown at all."""

from __future__ import annotations

import io
import sqlite3

from gapscope.analysis.pipeline import opened_analysis
from gapscope.cli import progress as status_module
from gapscope.cli.progress import STATUS_ROWS, TraceStatus
from paths import TRACES

ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def test_the_analysis_reports_reading_then_analyzing_with_the_row_count():
    path = TRACES / "torch_decode.sqlite"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ACTIVITY if t in have)
    conn.close()
    steps = []
    with opened_analysis(path, gaps=False, progress=lambda step, n: steps.append((step, n))) as analysis:
        assert analysis.result.devices
    assert steps == [("reading", rows), ("analyzing", rows)]


def test_a_line_only_for_a_large_trace_on_a_terminal():
    small = TraceStatus("small.sqlite", io.StringIO(), show=True)
    with small:
        small("reading", STATUS_ROWS - 1)
        small("analyzing", STATUS_ROWS - 1)
    assert small.shown == []
    out = io.StringIO()
    large = TraceStatus("/data/big.sqlite", out, show=True)
    with large:
        large("reading", STATUS_ROWS)
        large("analyzing", STATUS_ROWS)
        large("making the tables of", None)  # a later step without a count, once the line shows
    assert large.shown == ["reading big.sqlite: 250,000 GPU activities",
                           "analyzing big.sqlite: 250,000 GPU activities", "making the tables of big.sqlite"]
    piped = io.StringIO()  # not a terminal: nothing, however large
    quiet = TraceStatus("/data/big.sqlite", piped)
    with quiet:
        quiet("reading", 10 * STATUS_ROWS)
    assert quiet.shown == [] and piped.getvalue() == ""


def test_a_format_without_a_row_count_is_judged_by_its_file_size(monkeypatch):
    trace = TRACES / "torch_decode_small.pt.trace.json.gz"
    size = trace.stat().st_size
    monkeypatch.setattr(status_module, "STATUS_BYTES", size + 1)
    below = TraceStatus(trace, io.StringIO(), show=True)
    below("reading", None)
    assert below.shown == []
    monkeypatch.setattr(status_module, "STATUS_BYTES", size)
    with TraceStatus(trace, io.StringIO(), show=True) as at:
        at("reading", None)
    assert at.shown == ["reading torch_decode_small.pt.trace.json.gz"]
