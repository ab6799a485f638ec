"""Issue 41's findings outside the cache and the columnar reader (tests/test_cache_safety.py,
tests/test_columnar_damage.py): one regression test (or a parametrized family) per finding, each
failing on the code before the fix. Inputs are copies of shipped traces made in the test's own
folder, or SYNTHETIC files named so; the files in traces/ are never changed.
"""

from __future__ import annotations

import os
import shutil
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


@pytest.mark.parametrize("spelling", ["nested", "link", "dotdot"])
@pytest.mark.parametrize("command", INSIDE, ids=lambda c: "-".join(a for a in c if a.startswith("-")) or c[0])
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
