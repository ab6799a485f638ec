"""Issue 41's findings outside the cache and the columnar reader (tests/test_cache_safety.py,
tests/test_columnar_damage.py): one regression test (or a parametrized family) per finding, each
failing on the code before the fix. Inputs are copies of shipped traces made in the test's own
folder, or SYNTHETIC files named so; the files in traces/ are never changed.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import assert_one_line_error, gapscope
from damage import files_of
from paths import TRACES

PARQUET = TRACES / "torch_decode_small_parquet"


# ------------------------------------------------------------------ no output inside an input folder

INSIDE = [
    ("analyze", "{d}", "--plot", "{o}/figs"),
    ("analyze", "{d}", "-o", "{o}/r.json"),
    ("analyze", "{d}", "-f", "parquet", "-o", "{o}/tables"),
    ("analyze", "{d}", "--gaps-csv", "{o}/g.csv"),
    ("analyze", "{d}", "{d}", "-o", "{o}/r.csv"),
    ("plot", "{d}", "-o", "{o}/figs"),
    ("report", "{d}", "-o", "{o}/r.md"),
    ("report", "{d}", "--html", "{o}/r.html", "--no-figures"),
    ("export", "{d}", "--perfetto", "{o}/t.json"),
    ("compare", "{d}", "{d}", "-o", "{o}/c.json"),
    ("compare", "{d}", "{d}", "--markdown", "{o}/c.md"),
    ("compare", "{d}", "{d}", "--junit", "{o}/c.xml"),
]


@pytest.mark.parametrize("command, spelling", [(c, "nested") for c in INSIDE] + [
    (INSIDE[0], "link"), (INSIDE[0], "dotdot"), (INSIDE[5], "link"), (INSIDE[5], "dotdot")],
    ids=lambda c: ("-".join(a for a in c if a.startswith("-")) or c[0]) if isinstance(c, tuple) else c)
def test_no_output_anywhere_inside_an_input_export_folder(tmp_path, command, spelling):
    """Was: `analyze PQDIR --plot PQDIR/figs` and `plot PQDIR -o PQDIR/sub` wrote figures inside
    an input export folder (only the folder itself, or a file right in it, was refused)."""
    folder = tmp_path / "export_parquet"
    shutil.copytree(PARQUET, folder)
    (folder / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "link").symlink_to(folder)
    out = {"nested": folder / "sub" / "deeper", "link": tmp_path / "link" / "sub",
           "dotdot": Path(f"{folder}/sub/../sub/deeper")}[spelling]
    before = files_of(folder)
    proc = gapscope(*(a.format(d=folder, o=out) for a in command))
    assert_one_line_error(proc, f"inside the input folder {folder}; gapscope adds nothing to its inputs")
    assert files_of(folder) == before
    assert sorted(p.name for p in (folder / "sub").rglob("*")) == ["deeper"]


def test_github_step_summary_inside_an_input_folder_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "export_parquet"
    shutil.copytree(PARQUET, folder)
    (folder / "sub").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(folder / "sub" / "summary.md"))
    before = files_of(folder)
    proc = gapscope("compare", str(folder), str(folder))
    assert_one_line_error(proc, f"inside the input folder {folder}")
    assert files_of(folder) == before


def test_an_output_beside_an_input_folder_is_written(tmp_path):
    """The rule is about inside: a sibling folder whose name starts like the input's is not."""
    folder = tmp_path / "export_parquet"
    shutil.copytree(PARQUET, folder)
    out = tmp_path / "export_parquet_figs"
    proc = gapscope("analyze", str(folder), "-o", str(out) + ".json")
    assert proc.returncode == 0, proc.stderr
    assert Path(str(out) + ".json").stat().st_size > 0


# ------------------------------------------------------------------ write errors: one line, exit 2, nothing partial

SMALL = TRACES / "torch_decode_small.sqlite"


class _FullDisk:
    """A file object that takes ``room`` bytes and then fails as a full disk does (ENOSPC)."""

    def __init__(self, inner, room: int) -> None:
        self._inner, self._room = inner, room

    def write(self, data):
        size = len(data.encode() if isinstance(data, str) else memoryview(data).cast("B"))
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._inner.write(data)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._inner.close()


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(name)``: the output file named ``name`` takes 1,000 bytes, then the disk is full
    (SYNTHETIC: gapscope.files' private file of that name wrapped); every append fails at once."""
    from gapscope import files

    real = files._handle

    def fail(name: str) -> None:
        monkeypatch.setattr(files, "_handle", lambda fd, binary, target: _FullDisk(real(fd, binary, target), 1000)
                            if target.name == name else real(fd, binary, target))

    def no_room(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files, "_write_all", no_room)
    return fail


FULL = [
    (("analyze", "{t}", "-o", "{o}/r.json"), "{o}/r.json"),
    (("analyze", "{t}", "-f", "parquet", "-o", "{o}/tables"), "{o}/tables/gaps.parquet"),
    (("analyze", "{t}", "--gaps-csv", "{o}/g.csv", "-o", "{o}/r.txt"), "{o}/g.csv"),
    (("plot", "{t}", "-o", "{o}/figs"), "{o}/figs/timeline.png"),
    (("report", "{t}", "-o", "{o}/r.md"), "{o}/r_files/timeline.png"),
    (("report", "{t}", "--html", "{o}/r.html"), "{o}/r.html"),
    (("export", "{t}", "--perfetto", "{o}/t.json"), "{o}/t.json"),
    (("compare", "{t}", "{t}", "--markdown", "{o}/c.md"), "{o}/c.md"),
    (("compare", "{t}", "{t}", "--junit", "{o}/c.xml"), "{o}/c.xml"),
]


@pytest.mark.parametrize("command, failing", FULL, ids=lambda c: "-".join(a for a in c if a.startswith("-")) or c[0]
                         if isinstance(c, tuple) else None)
def test_a_full_disk_is_one_line_and_leaves_no_partial_output(tmp_path, full_disk, command, failing):
    """Was: an internal error (exit 3), and a 0-byte (or cut) output file left behind. The
    outputs already there keep their content; nothing new, and no private file, is left: a
    figure folder or the Parquet tables are one output (all of it, or nothing), and a report
    written before them stays whole."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.txt").write_text("the report of an earlier run\n")
    before = files_of(out)
    names = sorted(p.name for p in out.rglob("*"))
    full_disk(Path(failing).name)
    proc = gapscope(*(a.format(t=SMALL, o=out) for a in command))
    assert_one_line_error(proc, f"{failing.format(o=out)}: cannot write (No space left on device)")
    after = files_of(out)
    if "r.txt" in command[-1]:  # the report went first, whole, then the tables or figures failed
        assert (out / "r.txt").read_text().startswith("gapscope torch_decode_small.sqlite")
        after.pop("r.txt"), before.pop("r.txt")
    assert after == before
    assert sorted(p.name for p in out.rglob("*")) == names  # no folder made, no private file left


def test_an_output_over_an_old_file_keeps_it_whole_when_the_disk_is_full(tmp_path, full_disk):
    full_disk("r.json")
    old = tmp_path / "r.json"
    old.write_text('{"old": true}\n')
    assert_one_line_error(gapscope("analyze", str(SMALL), "-o", str(old)), f"{old}: cannot write")
    assert old.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_github_step_summary_on_a_full_disk_is_one_warning_and_appends_nothing(tmp_path, full_disk, monkeypatch):
    """The verdict stands (the summary page is a courtesy): exit 0, one warning line naming the
    file, and the file as it was (nothing half appended)."""
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier steps\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    proc = gapscope("compare", str(SMALL), str(SMALL), "-o", str(tmp_path / "c.txt"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"gapscope: warning: $GITHUB_STEP_SUMMARY: {summary}: cannot write (No space left on device)"]
    assert summary.read_text() == "# earlier steps\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_dev_full_as_the_output_and_as_stdout_is_one_line(tmp_path):
    """Was: 'internal error ... a bug in gapscope' (exit 3)."""
    assert_one_line_error(gapscope("analyze", str(SMALL), "-o", "/dev/full"),
                          "/dev/full: cannot write (No space left on device)")
    saved = tmp_path / "r.json"  # a saved result re-renders without numpy: a quick process
    assert gapscope("analyze", str(SMALL), "-o", str(saved)).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "gapscope", "analyze", str(saved), "-f", "json"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["gapscope: error: stdout: cannot write (No space left on device)"]


# ------------------------------------------------------------------ a file that changes while it is read

def _changing(monkeypatch, fmt: str, change) -> None:
    """Open traces of ``fmt`` with a reader that runs ``change(path)`` (a writer at work) while
    it reads the frames (SYNTHETIC: the writer is simulated inside the read)."""
    from gapscope.trace import handle

    real = handle.READERS[fmt]

    def opener(path: Path):
        reader = real(path)
        load = reader.load

        def changed_load(**options):
            change(path)
            return load(**options)

        reader.load = changed_load
        return reader

    monkeypatch.setitem(handle.READERS, fmt, opener)


def _delete_kernels(path: Path) -> None:
    import sqlite3

    with sqlite3.connect(path) as conn:  # what a program rewriting the export does
        conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")
    conn.close()


def _rewrite_a_table(folder: Path) -> None:
    table = folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    table.write_bytes(table.read_bytes())


def _rewrite(path: Path) -> None:
    path.write_bytes(path.read_bytes())  # the same bytes, written again: a new mtime and ctime


@pytest.mark.parametrize("name, fmt, change", [
    ("torch_decode_small.sqlite", "nsys-sqlite", _delete_kernels),
    ("torch_decode_small_parquet", "nsys-parquet", _rewrite_a_table),
    ("torch_decode_small.pt.trace.json.gz", "kineto", _rewrite),
], ids=["sqlite", "parquet", "kineto"])
def test_a_trace_that_changes_while_it_is_read_is_refused(tmp_path, monkeypatch, name, fmt, change):
    """Was: a writer deleting kernels during the read gave kernel counts that never existed,
    with no warning."""
    copy = tmp_path / name
    (shutil.copytree if (TRACES / name).is_dir() else shutil.copyfile)(TRACES / name, copy)
    _changing(monkeypatch, fmt, change)
    assert_one_line_error(gapscope("analyze", str(copy), "--no-cache"),
                          f"{copy}: the file changed while gapscope read it")


def test_a_trace_that_changes_after_its_frames_while_its_names_are_read_is_refused(tmp_path):
    """A change after the frames (names are still looked up in the export) is refused when the
    trace is closed."""
    from gapscope.analysis.pipeline import run_analysis
    from gapscope.errors import GapscopeError
    from gapscope.trace import open_trace

    copy = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, copy)
    with pytest.raises(GapscopeError, match="the file changed while gapscope read it"):
        with open_trace(copy) as trace:
            run_analysis(trace.frames())
            _delete_kernels(copy)
    with open_trace(SMALL) as trace:  # unchanged: no refusal
        assert len(trace.frames().activities) > 0


# ------------------------------------------------------------------ sparse files are refused before reading

@pytest.mark.parametrize("name, head", [("big.pt.trace.json", b'{"traceEvents": ['), ("big.json", b"{"),
                                        ("big.sqlite", None)])
def test_a_sparse_file_is_refused_before_it_is_read(tmp_path, name, head):
    """Was: a 50 GB sparse `.json` ended in MemoryError (exit 3); a SQLite export extended by a
    50 GB hole was hashed whole for minutes. SYNTHETIC: a head (or a real export) and a hole."""
    path = tmp_path / name
    if head is None:
        shutil.copyfile(SMALL, path)
    else:
        path.write_bytes(head)
    os.truncate(path, 50 << 30)
    if os.stat(path).st_blocks * 512 > 16 << 20:
        pytest.skip(f"{tmp_path}'s file system keeps no holes: the file is not sparse there")
    for command in (("analyze", str(path)), ("compare", str(path), str(path)), ("plot", str(path), "-o",
                                                                                   str(tmp_path / "f"))):
        assert_one_line_error(gapscope(*command), f"{path}: a sparse file (53.7 GB long, ")
    assert not (tmp_path / "f").exists()


# ------------------------------------------------------------ every text from a file is escaped, warnings included

RAW = ("\x1b", "\x07", "\r", "\u202e", "\u2066")


@pytest.fixture
def hostile_names(tmp_path) -> Path:
    """A copy of the small export whose decode_step ranges are named with ESC, BEL, CR and bidi
    controls (SYNTHETIC)."""
    import sqlite3

    copy = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'decode_step'",
                     ("de\x1b[31mcode\x07\rstep\u202eX\u2066",))
    conn.close()
    return copy


def test_matplotlib_glyph_warnings_reach_stderr_escaped(tmp_path, hostile_names):
    """Was: matplotlib's "Glyph 27 (ESC) missing" warnings printed the name's raw ESC, BEL and
    CR (and the source line under each) on stderr in plot, report and --plot. The warning lines
    are made in the command line's main, around every command; `plot` draws the same figures as
    the other two."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # shown whatever an earlier test showed
        proc = gapscope("plot", str(hostile_names), "-o", str(tmp_path / "figs"))
    assert proc.returncode == 0, proc.stderr
    for raw in RAW:
        assert raw not in proc.stderr and raw not in proc.stdout
    lines = proc.stderr.splitlines()
    assert "gapscope: warning: Glyph 27 (\\x1b) missing from font(s) DejaVu Sans." in lines
    assert "gapscope: warning: Glyph 13 (\\r) missing from font(s) DejaVu Sans." in lines
    assert all(line.startswith("gapscope: warning: ") for line in lines)
    assert len(lines) == len(set(lines))  # each warning once


def test_bidi_controls_print_escaped_in_tables(hostile_names):
    """Was: U+202E (right-to-left override) printed raw in tables, turning the rest of the line."""
    proc = gapscope("analyze", str(hostile_names), "--no-cache", "--wide")
    assert proc.returncode == 0, proc.stderr
    assert "de\\x1b[31mcode\\x07\\rstep\\u202eX\\u2066" in proc.stdout
    for raw in RAW:
        assert raw not in proc.stdout


# ------------------------------------------------------------------ keys out of range are counted damage

class _Names:
    def lookup(self, ids):
        return {int(i): f"name{int(i)}" for i in ids}

    def activity_name_ids(self, kind, rows):
        import numpy as np

        return np.full(len(rows), -1, dtype=np.int64)


def _frames(bad_call_proc: int | None = None, bad_range_tid: int | None = None):
    """SYNTHETIC frames as a reader hands them to build_frames: 20 calls on one thread of
    process 7 (the first two launch a kernel each) and 20 ranges on it; the last call's process
    or the last range's thread replaced by the bad value given."""
    import numpy as np
    import pandas as pd

    from gapscope.trace.frames import TraceMeta, build_frames

    tid, n = (7 << 24) | 1, 20
    i64 = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
    acts = pd.DataFrame({"row": i64([0, 1]), "start": i64([2000, 5000]), "end": i64([3000, 6000]),
                         "device": i64([0, 0]), "stream": i64([7, 7]), "proc": i64([7, 7]), "corr": i64([1, 2]),
                         "kind": np.zeros(2, np.int8), "name_id": i64([1, 1])})
    procs = [7] * n if bad_call_proc is None else [7] * (n - 1) + [bad_call_proc]
    starts = [1000 + 3000 * i for i in range(n)]
    api = pd.DataFrame({"start": i64(starts), "end": i64([t + 500 for t in starts]),
                        "tid": i64([tid] * n), "corr": i64(range(1, n + 1)), "name_id": i64([2] * n),
                        "proc": i64(procs)})
    tids = [tid] * n if bad_range_tid is None else [tid] * (n - 1) + [bad_range_tid]
    nvtx = pd.DataFrame({"start": i64([500 + i for i in range(n)]), "end": i64([90000] * n), "tid": i64(tids),
                         "event_type": i64([59] * n), "domain_id": i64([0] * n),
                         "name": np.array([f"r{i}" for i in range(n)], dtype=object)})
    syncs = pd.DataFrame({c: i64([]) for c in ("start", "device", "stream", "proc")})
    meta = TraceMeta(path="synthetic", format="kineto", nsys_version=None, export_schema=None)
    return build_frames(meta, activities=acts, api=api, nvtx=nvtx, syncs=syncs, names=_Names())


def test_a_call_whose_process_key_is_out_of_range_is_counted():
    """Was: a call's process (its key with the correlation id) was not checked: a PyTorch
    profiler call of pid -2**63 was kept, tied to nothing, with no warning."""
    assert _frames().warnings == []
    for bad in (-2**63, -1, 2**40):
        frames = _frames(bad_call_proc=bad)
        assert frames.api["corr"].tolist() == list(range(1, 20))
        assert frames.warnings == ["left out 1 of 20 CUDA API call rows as damaged (proc out of range: 1); every "
                                   "figure covers the other rows"]


def test_a_range_whose_thread_key_is_out_of_range_is_counted():
    """The rule a reader's ranges pass through (it held before; kept here as the contract a
    reader packs to): a thread key a format cannot pack (-1, as a reader hands a pid outside
    nsys's layout) leaves the range out, counted."""
    frames = _frames(bad_range_tid=-1)
    assert frames.nvtx["name"].tolist() == [f"r{i}" for i in range(19)]
    assert frames.warnings == ["left out 1 of 20 NVTX rows as damaged (tid out of range: 1); every figure "
                               "covers the other rows"]


# ------------------------------------------------------------------ a config file that cannot be read is refused

@pytest.mark.parametrize("body", [
    "[tool.gapscope.compare]\nfail = [\"gap_fraction:+0.5\"]\n".encode("utf-16"),
    b"# caf\xe9\n[tool.gapscope.compare]\nfail = [\"gap_fraction:+0.5\"]\n",
    b"# an unrelated project, in Latin-1: caf\xe9\n[project]\nname = \"x\"\n",
], ids=["utf-16", "latin-1", "latin-1 without the table"])
def test_a_pyproject_that_is_not_utf8_is_refused_wherever_it_comes_from(tmp_path, body):
    """Was: `compare` ignored a non-UTF-8 pyproject.toml in the working directory (its thresholds
    fell back to the defaults, silently) while --config refused the same file."""
    from gapscope.errors import GapscopeError
    from gapscope.regression.thresholds import resolve_settings

    (tmp_path / "pyproject.toml").write_bytes(body)
    with pytest.raises(GapscopeError, match="pyproject.toml is not UTF-8 text"):
        resolve_settings(search_dir=tmp_path)
    with pytest.raises(GapscopeError, match="pyproject.toml is not UTF-8 text"):
        resolve_settings(config=tmp_path / "pyproject.toml")
    if not body.startswith(b"\xff\xfe"):  # the command line once (UTF-16): the exit and the line
        return
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-m", "gapscope", "compare", str(SMALL), str(SMALL)], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["gapscope: error: config pyproject.toml is not UTF-8 text (gapscope compare "
                                        "reads the [tool.gapscope.compare] table of the pyproject.toml it finds here)"]


def test_an_output_written_over_an_old_file_keeps_its_mode(tmp_path):
    """The private file renamed over an output takes the old file's permissions, as writing into
    it did."""
    out = tmp_path / "r.json"
    out.write_text("old\n")
    os.chmod(out, 0o640)
    assert gapscope("analyze", str(SMALL), "-o", str(out)).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o640 and out.read_text().startswith('{"schema"')
