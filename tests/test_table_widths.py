"""Tables that fit the terminal: the layout rules on a small hand-made table, then the real
reports (one trace, several traces, a comparison) rendered at fixed widths, where no line may
be longer than the width and every number shown must be whole."""

from __future__ import annotations

import io
import re

import pytest

from gapscope.render import render
from gapscope.render.layout import Column, fit_columns, middle_ellipsis, shorten_names
from paths import ROOT, TRACES

WIDTHS = (80, 100, 120)


def test_middle_ellipsis():
    assert middle_ellipsis("vectorized_layer_norm_kernel", 16) == "vectoriz…_kernel"
    assert middle_ellipsis("short", 16) == "short"
    assert middle_ellipsis("abcdef", 2) == "a…"


def test_fit_columns_abbreviates_then_leaves_out_by_priority():
    cols = (Column("name", False), Column("kernels", priority=2, short="kern"), Column("gap %"),
            Column("p90", priority=3), Column("kernel p50", priority=1, short="k p50"))
    cells = [["decode_step", "4,992", "87.4%", "54.8 us", "2.62 us"]]
    # Full headers: 11 + 7 + 5 + 7 + 10 and 4 separators of 2 = 48.
    full = fit_columns(cols, cells, 48)
    assert (full.headers, full.widths, full.width, full.hidden) == (
        ("name", "kernels", "gap %", "p90", "kernel p50"), (11, 7, 5, 7, 10), 48, ())
    # One narrower: short headers (kern 5 wide for "4,992", k p50 7 wide for "2.62 us") = 43.
    short = fit_columns(cols, cells, 47)
    assert (short.headers, short.width, short.note()) == (
        ("name", "kern", "gap %", "p90", "k p50"), 43, "kern = kernels, k p50 = kernel p50")
    # 42: p90 (priority 3) goes first, then kernels (2), then kernel p50 (1).
    assert fit_columns(cols, cells, 42).headers == ("name", "kern", "gap %", "k p50")
    assert fit_columns(cols, cells, 30).headers == ("name", "gap %", "k p50")
    tight = fit_columns(cols, cells, 20)
    assert tight.headers == ("name", "gap %") and tight.width == 18
    assert tight.note() == "not shown: kernels, p90, kernel p50 (--wide shows them)"
    # Columns that always show are never left out and numbers never narrowed: wider than asked.
    assert fit_columns(cols, cells, 5).widths == (11, 5)


def test_names_shrink_in_the_middle_before_columns_go():
    cols = (Column("gap"), Column("after", False, priority=1), Column("by", False, priority=2))
    cells = [["115 ms", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_bias_TNT", "cuLaunchKernelEx"]]
    lay = fit_columns(cols, cells, 6 + 2 + 16 + 2 + 16, names=frozenset({1, 2}))
    assert lay.widths == (6, 16, 16) and lay.hidden == ()
    lay = fit_columns(cols, cells, 30, names=frozenset({1, 2}))
    assert lay.headers == ("gap", "after") and lay.widths == (6, 22)  # the room left goes to the name


def test_a_reading_is_squeezed_onto_three_lines_at_most():
    cols = (Column("gap"), Column("reading", False, wrap=True), Column("p90", priority=1))
    cells = [["115 ms", "host stalls: graphs won't", "1 us"], ["2 ms", "graphs: device turnaround", "2 us"]]
    # Its longest word is 10 wide ("turnaround"), but at 10 "host stalls: graphs won't" takes four
    # lines; at 12 it takes two ("host stalls:", "graphs won't") and the other three.
    lay = fit_columns(cols, cells, 6 + 2 + 12 + 2 + 4)
    assert lay.widths == (6, 12, 4) and lay.hidden == ()
    lay = fit_columns(cols, cells, 6 + 2 + 12 + 2 + 3)  # one short: p90 goes, the reading keeps 12 and more
    assert lay.hidden == ("p90",) and lay.widths == (6, 17)


def test_names_that_would_look_alike_show_where_they_differ():
    blocks = [f"FSDP::pre_forward (blocks.{i}._checkpoint_wrapped_module)" for i in (3, 4, 10)]
    post = "FSDP::post_forward (blocks.2._checkpoint_wrapped_module)"
    names = [*blocks, post, "aten::cat"]
    # Cut in the middle, the three blocks would all read "FSDP::pre…ed_module)" at 21.
    assert len({middle_ellipsis(n, 21) for n in blocks}) == 1
    # They share their first 26 characters ("FSDP::pre_forward (blocks."): 7 of the head (21 // 3),
    # an ellipsis, then from the word holding the difference ("blocks", after the "(") 13 more,
    # cut with an ellipsis. The others are cut in the middle as before; a short name stays whole.
    assert shorten_names(names, 21) == ["FSDP::p…blocks.3._ch…", "FSDP::p…blocks.4._ch…", "FSDP::p…blocks.10._c…",
                                        middle_ellipsis(post, 21), "aten::cat"]
    for width in range(8, 60):
        short = shorten_names(names, width)
        assert all(len(x) <= width for x in short)
        if width >= 16:
            assert len(set(short)) == len(names), (width, short)


def test_the_room_left_is_shared_evenly_between_names():
    # Two names cut to NAME_MIN (16) in a 6 + 16 + 16 table with two separators: 42 wide.
    cols = (Column("gap"), Column("before", False, priority=1), Column("after", False, priority=1))
    cells = [["115 ms", "b" * 40, "a" * 30]]
    names = frozenset({1, 2})
    assert fit_columns(cols, cells, 42, names=names).widths == (6, 16, 16)
    # 18 more characters: 9 each, not all of them to the first name.
    assert fit_columns(cols, cells, 60, names=names).widths == (6, 25, 25)
    # An odd one left over goes to the leftmost.
    assert fit_columns(cols, cells, 61, names=names).widths == (6, 26, 25)
    # Room for the shorter name whole (30): the longer gets the rest, up to its 40.
    assert fit_columns(cols, cells, 6 + 2 + 36 + 2 + 30, names=names).widths == (6, 36, 30)
    assert fit_columns(cols, cells, 6 + 2 + 40 + 2 + 30, names=names).widths == (6, 40, 30)


def _lines(result, width=None, **options):
    out = io.StringIO()
    render(result, "table", out, width=width, **options)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_fits_and_keeps_its_numbers_whole(analyzed, width):
    result = analyzed("torch_decode")
    lines = _lines(result, width)
    assert max(len(line) for line in lines) <= width
    text = "\n".join(lines)
    before_top_gaps = text.split("Longest gaps")[0]
    assert "…" not in before_top_gaps  # no number or range name was cut
    tables = lines[next(i for i, line in enumerate(lines) if line.startswith("NVTX ranges by name")):]
    eager = next(line for line in tables if line.startswith("eager "))
    # The eager range, hand-checked against the JSON: 100 ms gap of a 107 ms span, 93.4 %,
    # median gap 42.3 us, median kernel 2.4 us.
    for value in ("107 ms", "100 ms", "93.4%", "42.3 us", "2.4 us"):
        assert value in eager, (width, value, eager)
    idle = next(line for line in tables if line.startswith("eager (x1)")).split()
    row = next(r for r in result.by_name if r["name"] == "eager")
    cats = row["gap_by_category_ns"]
    # The shares the row's categories give, rounded as the table rounds them: launch and host
    # always show; the ceiling is the steady span over its busy time less 150 ns for each of its
    # eager kernels (no copies, no stalls).
    assert idle[:6] == ["eager", "(x1)", "100", "ms", f"{100 * cats['launch'] / row['gap_ns']:.0f}%",
                        f"{100 * cats['host'] / row['gap_ns']:.0f}%"] == ["eager", "(x1)", "100", "ms", "28%", "72%"]
    ceiling = row["steady_span_ns"] / (row["busy_ns"] - 150 * row["kernels"])
    assert idle[-1] == f"{ceiling:.2f}x" == "16.03x"
    payoff = next(line for line in lines if line.startswith("eager        graph"))
    measured = row["steady_span_ns"] / next(r for r in result.by_name if r["name"] == "graph")["steady_span_ns"]
    assert payoff.split()[-1] == "16.03x" and f"{measured:.2f}x" == "12.04x" in payoff.split()


def test_a_file_gets_every_column_and_wide_too(analyzed):
    from gapscope.render import sections

    result = analyzed("torch_decode")
    full = "\n".join(_lines(result))
    wide = "\n".join(_lines(result, width=80, wide=True))
    assert full == wide
    header = next(line for line in full.splitlines() if line.startswith("name "))
    assert header.split() == ["name", "count", "kernels", "span", "busy", "gap", "gap", "%", "gaps", "p50",
                              "p90", "p99", "max", "gap", "kernel", "p50", "reading"]
    assert "not shown" not in full and "…" not in full
    assert len(sections.top_gaps(result).rows) == 10


def test_several_traces_fit_80_columns():
    from gapscope.fleet.executors import InProcess
    from gapscope.fleet.merge import analyze_fleet

    fleet = analyze_fleet([str(TRACES / "torch_decode.sqlite"), str(TRACES / "torch_decode_sync.sqlite")], InProcess())
    lines = _lines(fleet, 80, limit=5)
    assert max(len(line) for line in lines) <= 80
    stragglers = next(i for i, line in enumerate(lines) if line.startswith("Stragglers"))
    graph = next(line for line in lines[stragglers:] if line.startswith("graph "))
    assert graph.split()[:4] == ["graph", "torch_decode_sync", "2.29", "ms"]
    ranks = next(line for line in lines if line.startswith("torch_de") and "97.1%" in line)  # a name may be cut
    assert "507 ms" in ranks and "522 ms" in ranks


def test_a_comparison_fits_80_columns(analyzed):
    from gapscope.regression.comparison import compare

    comparison = compare([analyzed("torch_decode").to_dict()], [analyzed("torch_decode_sync").to_dict()])
    lines = _lines(comparison, 80)
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if line.split()[:3] == ["REGRESSION", "graph", "gap_fraction"])
    assert row.split() == ["REGRESSION", "graph", "gap_fraction", "17.6%", "45.7%", "+28.1", "pp"]
    text = "\n".join(lines)
    # The note is a line of its own, as wide as the terminal (the table is narrower than 80).
    assert "\nbase = baseline, cur = current; not shown: scope, Δ%, limit (--wide shows them)\n" in text
    # each failure in words, wrapped at the width and never cut
    assert "  ✗ range graph: sync time 0 -> 4.74 ms: a new host synchronize" in lines


def _readme_excerpt() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = text.index("The start of `gapscope analyze traces/torch_decode.sqlite`")
    return text[intro:].split("```")[1].split("\n", 1)[1]  # the block without its ```text line


def test_every_number_of_the_readme_example_shows_at_80_columns(analyzed):
    excerpt = _readme_excerpt()
    assert max(len(line) for line in excerpt.splitlines()) <= 80
    shown = "\n".join(_lines(analyzed("torch_decode"), 80))
    numbers = re.findall(r"\d[\d,.]*(?: ?(?:ns|us|ms|s)\b|%|x\b)?", excerpt)
    assert len(numbers) > 40
    for n in numbers:
        assert n in shown, n
    # The excerpt is the report itself, line for line (the tables it quotes).
    for line in excerpt.strip("\n").splitlines():
        assert line.rstrip() in {s.rstrip() for s in shown.splitlines()}, line


def test_streams_without_busy_time_are_counted_in_the_title_not_listed(analyzed):
    result = analyzed("jax_train")
    idle = [s for s in result.streams if s["kernels"] == 0 and s["gpu_span_ns"] == 0]
    assert idle and all(s["memops"] > 0 for s in idle)  # XLA's copy streams
    lines = _lines(result)
    at = next(i for i, line in enumerate(lines) if line.startswith("Streams"))
    assert lines[at] == (f"Streams (whole trace; {len(idle)} more with copies only, not listed: "
                         "--count-memops counts copies as busy)")
    rows = lines[at + 3:lines.index("", at)]  # title, header, rule, then the rows up to the blank line
    assert [row.split()[2] for row in rows] == [str(s["stream"]) for s in result.streams if s not in idle]
    counted = _lines(analyzed("jax_train", count_memops=True))  # copies busy: every stream listed
    assert "Streams (whole trace)" in counted


def test_the_idle_table_leaves_out_timelines_without_gap_time():
    from gapscope.analysis.pipeline import analyze
    from paths import SAXPY_NAME, thirdparty

    result = analyze(thirdparty(SAXPY_NAME))
    gapless = [r["name"] for r in result.by_name if r["kernels"] > 0 and r["gap_ns"] == 0]
    assert gapless == ["saxpy"]  # five 17.7 ms kernels, one per range: no gap inside any
    lines = _lines(result)
    at = next(i for i, line in enumerate(lines) if line.startswith("Why the GPU sat idle"))
    rows = lines[at + 3:lines.index("", at)]
    assert [row.split()[:2] for row in rows] == [["device", str(d["device"])] for d in result.devices]


def test_a_report_that_is_not_on_a_terminal_has_no_trailing_spaces(analyzed):
    from gapscope.regression.comparison import compare

    result = analyzed("torch_decode")
    padded = io.StringIO()
    render(result, "table", padded, width=100)  # a width asked for, as on a terminal: rich pads cells
    plain = padded.getvalue().splitlines()
    assert all(line == line.rstrip(" ") for line in plain)
    comparison = compare([result.to_dict()], [analyzed("torch_decode_sync").to_dict()])
    for report in (result, comparison):
        for width in (None, 80):
            lines = _lines(report, width)
            assert lines and all(line == line.rstrip(" ") for line in lines), width
    # Only a line's trailing spaces go, whatever pieces it is written in.
    from gapscope.render.console import _WithoutTrailingSpaces

    out = io.StringIO()
    file = _WithoutTrailingSpaces(out)
    for piece in ("name  gap  ", " \nx  y", "  \n\n", "last  "):
        file.write(piece)
    file.flush()
    assert out.getvalue() == "name  gap\nx  y\n\nlast  "  # a line left open is written as it is
