"""The README a new user reads: its commands run as written (each `$ gapscope ...` line of its
console blocks, from a folder holding the shipped traces, and the set-up block's analysis), its
example is the report itself (tests/test_table_widths.py checks it number for number at 80
columns), its "what to do next" quotes every remedy of gapscope.catalog, CI runs its test command,
it is short, in plain words, and every link leads somewhere."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex

import pytest

from gapscope.catalog import CATEGORIES, VERDICTS
from paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", re.S | re.M)
BLOCKS = [(m.group(1), m.group(2)) for m in FENCE.finditer(README)]
COMMANDS = [line[2:] for lang, text in BLOCKS if lang == "console" for line in text.splitlines()]
SETUP = ["python3 -m venv .venv && . .venv/bin/activate",
         "pip install -e . && gapscope analyze traces/torch_decode.sqlite",
         "pip install -e '.[test]' && python -m pytest -n auto"]


def run(command: str, cwd) -> tuple[int, str, str]:
    """A `gapscope ...` line run in this process from ``cwd``: (exit status, stdout, stderr)."""
    from gapscope.cli import main

    args = shlex.split(command)
    assert args[0] == "gapscope"
    out, err = io.StringIO(), io.StringIO()
    here, code = os.getcwd(), 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args[1:])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder with the shipped traces in it, as a checkout's root has them."""
    where = tmp_path_factory.mktemp("readme")
    (where / "traces").symlink_to(ROOT / "traces")
    return where


def test_the_setup_is_a_venv_and_two_commands_and_ci_runs_the_test_command():
    (setup,) = [text for lang, text in BLOCKS if lang == "sh" and "venv" in text]
    assert setup.splitlines() == SETUP
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert SETUP[2].split(" && ")[1] in ci  # `python -m pytest -n auto`, a line of its own
    assert "python -m pip install -q -e '.[test]'" in ci


def test_the_setup_analysis_starts_with_the_readme_example(folder):
    code, out, err = run(SETUP[1].split(" && ")[1], folder)
    assert code == 0, err
    example = next(text for lang, text in BLOCKS if lang == "text" and text.startswith("The answer"))
    answer = example.split("\n\n")[0].splitlines()
    lines = out.splitlines()
    at = lines.index(answer[0])
    assert lines[at:at + len(answer)] == answer  # the answer block, as the report prints it


@pytest.mark.parametrize("command", COMMANDS)
def test_every_usage_command_runs_as_written(command, folder):
    # a command that reads what an earlier one of the README writes (`-o result.json`) gets it
    # made first: the cases may run apart (pytest -n), each worker with a folder of its own
    words = shlex.split(command)
    for earlier in COMMANDS[:COMMANDS.index(command)]:
        e = shlex.split(earlier)
        out = e[e.index("-o") + 1] if "-o" in e else None
        if out in words and not (folder / out).exists():
            assert run(earlier, folder)[0] == 0, earlier
    code, out, err = run(command, folder)
    # compare exits 1 on a regression: the README's pair has one (a synchronize was added)
    assert code == (1 if command.startswith("gapscope compare") else 0), (command, err)
    assert "Traceback" not in err and "internal error" not in err


def test_the_usage_commands_cover_every_command_that_needs_no_gpu():
    assert {c.split()[1] for c in COMMANDS} == {"analyze", "compare", "report", "plot", "export"}
    assert len(COMMANDS) >= 8


def test_what_to_do_next_quotes_every_remedy_and_names_the_verdicts():
    section = README.split("## What to do next")[1].split("\n## ")[0]
    for c in CATEGORIES:
        assert c.remedy in section, c.name
    for v in VERDICTS:  # each verdict's reading, as the tables print it (the replays' "graphs: ...")
        assert f"`{v.reading}`" in section or v.code == "graph_replay", v.code
    assert "`graphs: ...`" in section
    for switch in ('torch.compile(model, mode="reduce-overhead")', "torch.cuda.CUDAGraph", "enforce_eager",
                   "cudagraph_capture_sizes", "--cuda-graph-max-bs", "disable_cuda_graph", "jax.jit",
                   "xla_gpu_enable_command_buffer", "TensorRT-LLM"):
        assert switch in section, switch


def test_it_reads_in_five_minutes_in_plain_words():
    prose = FENCE.sub("", README)
    words = prose.split()
    assert len(words) <= 1_800
    sentences = [s for s in re.split(r"(?<=[.!?:])\s+", re.sub(r"\|[^\n]*\|", "", prose)) if len(s.split()) > 3]
    assert max(len(s.split()) for s in sentences) <= 60
    for jargon in ("issue", "design text", "the seed", "our 2-core", "b85bc89"):
        assert jargon not in README.lower(), jargon
    assert not re.search(r"\b[0-9a-f]{7,40}\b", prose)  # no commit hashes


def test_every_link_leads_somewhere():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert len(local) >= 15
    for link in local:
        assert (ROOT / link).exists(), link
    # The developer's content moved out of the README, into docs/development.md.
    for heading in ("## Performance", "## Testing", "## Layout"):
        assert heading not in README
        assert heading.replace("Testing", "Set-up and tests") in (ROOT / "docs" / "development.md").read_text(
            encoding="utf-8")
