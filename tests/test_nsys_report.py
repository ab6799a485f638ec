""".nsys-rep reports: exported once with nsys into gapscope's cache, then read as their export.

There is no nsys on the CPU machines, so a FAKE nsys (a script written here) stands in for it: it
answers `nsys export --help` with the export types it is told to offer, and "exports" a report by
copying the real export of traces/torch_decode_small.nsys-rep that nsys 2025.3 wrote (traces/
torch_decode_small_{arrow,parquet}, .sqlite). What is tested is gapscope's side: which nsys
command it runs, where the export goes, that it is reused, and that the report is never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from clirun import assert_one_line_error, gapscope
from gapscope.analysis.pipeline import analyze
from gapscope.capture import nsys as capture
from gapscope.errors import GapscopeError
from paths import TRACES

REPORT = TRACES / "torch_decode_small.nsys-rep"
EXPORTS = {"arrowdir": TRACES / "torch_decode_small_arrow", "parquetdir": TRACES / "torch_decode_small_parquet",
           "sqlite": TRACES / "torch_decode_small.sqlite"}

FAKE = f"""#!{sys.executable}
import json, os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
offers = os.environ.get("FAKE_NSYS_OFFERS", "sqlite,hdf,text,json,info,arrow,arrowdir,parquetdir")
if args == ["export", "--help"]:
    print("usage: nsys export [<args>] <input-file>")
    print("  -t, --type=<sqlite|...>  Export format type. Possible values are: " + offers + ".")
    sys.exit(0)
if os.environ.get("FAKE_NSYS_FAIL"):
    print("Processing events... Error: the report file is corrupt")
    sys.exit(1)
kind, out = args[args.index("--type") + 1], args[args.index("-o") + 1]
src = json.loads(os.environ["FAKE_NSYS_EXPORTS"])[kind]
(shutil.copytree if os.path.isdir(src) else shutil.copy)(src, out)
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    """A fake nsys as $GAPSCOPE_NSYS, a fresh $XDG_CACHE_HOME; returns the invocation log reader."""
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir()
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("GAPSCOPE_NSYS", str(exe))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_EXPORTS", json.dumps({k: str(v) for k, v in EXPORTS.items()}))

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def user_report(tmp_path: Path, name: str = "run.nsys-rep") -> Path:
    """A copy of the real report in a folder of its own, as a user would have it."""
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    path = folder / name
    shutil.copy(REPORT, path)
    return path


def source_free(result) -> dict:
    data = result.to_dict()
    data["trace"] = {k: v for k, v in data["trace"].items() if k not in ("path", "name", "format")}
    return data


def test_a_report_is_exported_once_into_the_cache_and_read_as_its_export(tmp_path, fake_nsys):
    report = user_report(tmp_path)
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    before = (sorted(os.listdir(report.parent)), report.stat().st_mtime_ns, digest)

    result = analyze(report)
    assert source_free(result) == source_free(analyze(EXPORTS["arrowdir"]))
    assert (result.trace["path"], result.trace["format"]) == (str(report), "nsys-rep")
    cached = tmp_path / "cache" / "gapscope" / "reports" / digest / "arrowdir"
    assert sorted(os.listdir(cached)) == sorted(os.listdir(EXPORTS["arrowdir"]))
    assert sorted(os.listdir(cached.parent)) == ["arrowdir"]  # no scratch folder left behind
    (help_call, export_call) = fake_nsys()
    assert help_call == ["export", "--help"]
    assert export_call[:4] == ["export", "--type", "arrowdir", "-o"] and export_call[5] == str(report)
    assert Path(export_call[4]).parent.parent == cached.parent  # written privately, then renamed

    again = tmp_path / "user" / "renamed.nsys-rep"
    shutil.copy(report, again)
    assert source_free(analyze(report)) == source_free(analyze(again)) == source_free(result)
    assert len(fake_nsys()) == 2  # the same content under any name: nsys is not run again
    assert (sorted(os.listdir(report.parent)), report.stat().st_mtime_ns,
            hashlib.sha256(report.read_bytes()).hexdigest()) == (sorted([*before[0], "renamed.nsys-rep"]), *before[1:])


@pytest.mark.parametrize("offers,chosen", [("sqlite,parquetdir", "parquetdir"), ("sqlite,hdf,text", "sqlite")])
def test_the_fastest_export_this_nsys_offers(tmp_path, fake_nsys, monkeypatch, offers, chosen):
    monkeypatch.setenv("FAKE_NSYS_OFFERS", offers)
    report = user_report(tmp_path)
    result = analyze(report)
    assert source_free(result) == source_free(analyze(EXPORTS[chosen]))
    assert fake_nsys()[1][:3] == ["export", "--type", chosen]
    assert capture.export_types(Path(os.environ["GAPSCOPE_NSYS"])) == (*(["parquetdir"] if chosen != "sqlite" else []),
                                                                        "sqlite")


def test_a_failed_export_is_one_line_and_caches_nothing(tmp_path, fake_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_FAIL", "1")
    report = user_report(tmp_path)
    assert_one_line_error(gapscope("analyze", str(report)), f"{report}: `nsys export --type arrowdir` exited with "
                          "1: Processing events... Error: the report file is corrupt")
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    assert os.listdir(tmp_path / "cache" / "gapscope" / "reports" / digest) == []


def test_export_report_never_overwrites(tmp_path, fake_nsys):
    out = tmp_path / "mine"
    out.mkdir()
    with pytest.raises(GapscopeError, match="already exists; export_report never overwrites"):
        capture.export_report(REPORT, out, "parquetdir")
    written = capture.export_report(REPORT, tmp_path / "fresh", "parquetdir")
    assert written == tmp_path / "fresh" and (written / "META_DATA_EXPORT.parquet").is_file()


def test_no_nsys_is_one_line_naming_the_report_and_what_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("GAPSCOPE_NSYS", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    report = user_report(tmp_path)
    # The fix first, and short: not every place the search looked.
    proc = gapscope("analyze", str(report))
    assert_one_line_error(proc, f"{report}: export it where nsys is (`nsys export --type parquetdir -o DIR "
                          f"{report}`) and give gapscope DIR, or install Nsight Systems (or set GAPSCOPE_NSYS): a "
                          f".nsys-rep is read through nsys, and GAPSCOPE_NSYS {tmp_path / 'none'}: no executable "
                          "nsys there")
    assert len(proc.stderr.replace(str(report), "R").replace(str(tmp_path), "T")) < 250
    assert_one_line_error(gapscope("compare", str(report), str(report)), f"{report}: export it where nsys is")
    assert not (tmp_path / "cache").exists()
