"""The report as one self-contained HTML page, loaded in a real headless Chromium (no console
error, no request beyond the file itself, the figures drawn, nothing wider than the window),
and the Markdown report's links, which must render in CommonMark whatever the file is called;
both on several traces too."""

from __future__ import annotations

import re
import struct
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

import reference
from browser import Browser
from clirun import assert_one_line_error, gapscope
from paths import TRACES
from synthetic import Synthetic


class Tags(HTMLParser):
    """Counts start tags and collects the text of every table cell."""

    def __init__(self) -> None:
        super().__init__()
        self.count: dict[str, int] = {}
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        self.count[tag] = self.count.get(tag, 0) + 1
        if tag == "td":
            self._in_cell = True
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells[-1] += data


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def page_file(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    proc = gapscope("report", str(TRACES / "cupy_paths_node.sqlite"), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_page_holds_the_report(page_file, analyzed):
    text = page_file.read_text(encoding="utf-8")
    tags = Tags()
    tags.feed(text)
    assert text.startswith("<!DOCTYPE html>") and tags.count["svg"] == 3  # timeline, histogram, crossover
    assert "<script" not in text and "http://" not in text.split("<svg")[0] and "<link" not in text
    result = analyzed("cupy_paths_node")
    # The eager/k=2us reading, against the plain sort-and-merge of tests/reference.py.
    path = str(TRACES / "cupy_paths_node.sqlite")
    (rng,) = [r for r in reference.ranges(path) if r["name"] == "eager/k=2us"]
    kernels, span, gap = reference.range_metrics(rng, reference.kernels(path))
    assert (kernels, span, gap) == (300, 2_314_818, 1_968_962) and f"{100 * gap / span:.1f}" == "85.1"
    # The answer first: the ceiling is the span over its busy time less 150 ns for each of its 300
    # eager kernels (2,314,818 / (345,856 - 45,000)), the measured replay the span over its graph
    # twin's (2,314,818 / 450,816).
    (twin,) = [r for r in reference.ranges(path) if r["name"] == "graph/k=2us"]
    _, twin_span, _ = reference.range_metrics(twin, reference.kernels(path))
    ceiling, measured = span / (span - gap - 150 * kernels), span / twin_span
    assert (f"{ceiling:.1f}", f"{measured:.1f}") == ("7.7", "5.1")
    assert text.index("The answer") < text.index("<table")
    # The prediction as the result holds it (tests/test_prediction.py checks the model itself).
    row = next(x for x in result.by_name if x["name"] == "eager/k=2us")
    p, lo, hi = row["graph_predicted_speedup"], row["graph_predicted_low"], row["graph_predicted_high"]
    assert f"<li><strong>eager/k=2us (x1): launch-bound: graphs ~{p:.1f}x</strong><br>predicted {p:.1f}x " \
           f"({lo:.1f}x-{hi:.1f}x); ceiling {ceiling:.1f}x; measured replay {measured:.1f}x (graph/k=2us, traced)</li>" in text
    # The longest gaps, all ten, in the order of the result.
    top = [g["gap_ns"] for g in result.top_gaps]
    assert len(top) == 10 and top == sorted(top, reverse=True)
    assert "Longest gaps (10)" in text


def test_trace_text_is_escaped(tmp_path):
    """SYNTHETIC: a range named like markup stays text."""
    t = Synthetic()
    t.range(0, 10_000, "<img src=x onerror=alert(1)>")
    t.launch(100, 1_000, 2_000, 1).launch(200, 3_000, 4_000, 2)
    out = tmp_path / "r.html"
    assert gapscope("report", str(t.write(tmp_path / "s.sqlite")), "--html", str(out), "--no-figures").returncode == 0
    text = out.read_text()
    assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text


def test_the_page_in_headless_chromium(page_file, tmp_path):
    with Browser() as browser:
        page = browser.load(page_file, width=1280)
        assert page.console_errors == []
        # Nothing fetched but the page and the images inside it (the timeline's raster layers).
        assert page.requests[0] == page_file.resolve().as_uri()
        assert all(u.startswith("data:image/png;base64,") for u in page.requests[1:])
        assert page.evaluate("document.title") == "gapscope report: cupy_paths_node.sqlite"
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        # The figures at their own size (crossover 10 in = 960 px), shrunk to the page's 1200 px
        # column when wider (timeline 14 in, histogram 14.1 in).
        widths = page.evaluate("[...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)")
        assert [round(w) for w in widths] == [1200, 1200, 960]
        assert page.evaluate("document.querySelectorAll('table').length") == 9
        assert page.evaluate("document.querySelector('h1').textContent") == "gapscope report: cupy_paths_node.sqlite"
        shot = page.screenshot()
    (tmp_path / "report-1280.png").write_bytes(shot)
    width, height = png_size(shot)
    assert width == 1280 and height > 2000
    assert len(shot) > 100_000  # figures and tables, not a blank page


def test_markdown_links_render_in_commonmark_with_spaces(tmp_path):
    from markdown_it import MarkdownIt

    folder = tmp_path / "my reports"
    folder.mkdir()
    md = folder / "my report.md"
    proc = gapscope("report", str(TRACES / "torch_decode.sqlite"), "-o", str(md))
    assert proc.returncode == 0, proc.stderr
    rendered = MarkdownIt("commonmark").render(md.read_text(encoding="utf-8"))
    srcs = re.findall(r'<img src="([^"]+)"', rendered)
    assert srcs == ["my%20report_files/timeline.png", "my%20report_files/histogram.png"]
    for src in srcs:
        assert (folder / unquote(src)).stat().st_size > 5_000


def test_several_traces_one_report_and_their_plots(tmp_path):
    md, page = tmp_path / "fleet.md", tmp_path / "fleet.html"
    proc = gapscope("report", "traces/torch_decode.sqlite", "traces/torch_decode_sync.sqlite", "-o", str(md),
                    "--html", str(page), "--range", "eager")
    assert proc.returncode == 0, proc.stderr
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# gapscope report: 2 traces\n")
    assert re.findall(r"^## (.+)$", text, flags=re.M) == ["torch_decode.sqlite", "torch_decode_sync.sqlite"]
    assert "![timeline](fleet_files/torch_decode_sync/timeline.png)" in text
    assert "- **eager (x1): host-bound: graphs \\~10x**" in text and "- **eager (x1): host-bound: graphs \\~8.7x**" in text
    html = page.read_text(encoding="utf-8")
    assert html.count('<section class="trace">') == 2 and html.count("<svg") == 4

    out = tmp_path / "figs"
    proc = gapscope("plot", "traces/torch_decode.sqlite", "traces/torch_decode_sync.sqlite", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(out / d / f) for d in ("torch_decode", "torch_decode_sync")
                                   for f in ("timeline.png", "histogram.png")]


def test_report_errors(tmp_path):
    assert_one_line_error(gapscope("report", "traces/torch_decode.sqlite"), "-o report.md and/or --html report.html")
    assert_one_line_error(gapscope("report", "traces/torch_decode.sqlite", "-o", str(tmp_path / "a.html"),
                                   "--html", str(tmp_path / "b.html")), "-o and --html both ask for the HTML page")
    assert_one_line_error(gapscope("report", "traces/torch_decode.sqlite", "--html", str(tmp_path / "no" / "r.html")),
                          "--html needs a file in an existing folder")
    saved = tmp_path / "r.json"
    saved.write_text("{}")
    assert_one_line_error(gapscope("report", str(saved), "-o", str(saved), "-f", "markdown"),
                          "refusing to overwrite input")
    assert saved.read_text() == "{}"


#: Every element of a table whose content is wider than its box (clipped, or scrolled inside it).
CLIPPED = ("[...document.querySelectorAll('.scroll, table, th, td')]"
           ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.tagName + ' ' + e.textContent.slice(0, 60))")


def test_the_fsdp_report_at_1400_px_clips_nothing(fsdp, tmp_path):
    """The third-party FSDP trace (long range names, long kernel names, readings) at 1400 px: no
    table scrolls or clips a cell (names and readings wrap), the page is no wider than the window."""
    out = tmp_path / "fsdp.html"
    proc = gapscope("report", str(fsdp), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    with Browser() as browser:
        page = browser.load(out, width=1400)
        assert page.console_errors == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert page.evaluate("document.querySelectorAll('table').length") >= 8
        assert page.evaluate(CLIPPED) == []
        # The readings are there in full, the longest gaps' kernel names too.
        cells = page.evaluate("[...document.querySelectorAll('td')].map(c => c.textContent)")
        assert "host-bound: graphs ~2.3x" in cells and "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN" in cells
        shot = page.screenshot()
    (tmp_path / "fsdp-1400.png").write_bytes(shot)
    assert png_size(shot)[0] == 1400 and len(shot) > 100_000
