"""Every code block of docs/api.md runs, in order, in one session, so the page cannot rot:
``python`` blocks are doctests (their output is checked exactly, up to whitespace), ``console``
blocks are commands run in a process of their own, and ``text`` blocks are signatures that must
be the function's own. Nothing else may appear in a fence."""

from __future__ import annotations

import doctest
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import gapscope
from paths import ROOT

PAGE = ROOT / "docs" / "api.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)


def blocks() -> list[tuple[str, str, int]]:
    """(language, text, line number) of every fenced block of the page, in order."""
    text = PAGE.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def test_the_page_has_only_blocks_the_test_runs():
    found = blocks()
    assert len(found) >= 15
    for lang, text, line in found:
        assert lang in ("python", "console", "text"), f"docs/api.md:{line}: a ```{lang} block the test cannot run"
        if lang == "python":
            assert text.lstrip().startswith(">>> "), f"docs/api.md:{line}: a python block must be a doctest"
        if lang == "console":
            assert all(ln.startswith("$ gapscope ") for ln in text.splitlines()), line


def test_every_block_of_the_page_runs(tmp_path, monkeypatch):
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    globs: dict = {}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for lang, text, line in blocks():
        if lang == "python":
            test = parser.get_doctest(text, globs, f"docs/api.md:{line}", str(PAGE), line)
            examples += len(test.examples)
            result = runner.run(test, clear_globs=False)
            globs = test.globs  # a DocTest works on a copy: the next block goes on from this one's names
            assert result.failed == 0, f"docs/api.md:{line}: {result.failed} example(s) failed (see above)"
        elif lang == "console":
            for command in text.splitlines():
                args = command.split()[2:]
                proc = subprocess.run([sys.executable, "-m", "gapscope", *args], capture_output=True, text=True,
                                      cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
                assert proc.returncode == 0, f"docs/api.md:{line}: {command}\n{proc.stderr}"
        else:
            name, sig = text.split("(", 1)
            want = re.sub(r"\s+", " ", f"({sig}").strip()
            sig = inspect.signature(getattr(gapscope, name.split(".")[1]))
            params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
            bare = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
            assert str(bare).replace("'", '"') == want, (line, str(bare))
    assert examples >= 30
    assert (tmp_path / "tables" / "gaps.parquet").is_file() and (tmp_path / "eager.png").is_file()
