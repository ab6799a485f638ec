"""Seeded mutations of a trace and of result JSONs, and the judgement of what gapscope did with
them: shared by tests/test_fuzz.py (a few hundred cases in the suite) and tools/fuzz_campaign.py
(thousands, each in a worker process with a time bound).

A trace case copies the fuzz seed (tests/damage.py: a small cut of torch_decode.sqlite), damages
it (SQL-level: NULLs, text, blobs, reals and extreme integers in any column gapscope reads, odd
rowids, deleted and duplicated rows, dropped columns and tables; byte-level: flipped bytes, a
truncated file) and runs ``gapscope analyze COPY -f json``. The outcome must be one of

* ``refused``: exit 2 with exactly one ``gapscope: error:`` line;
* ``correct``: exit 0 and figures equal to tests/reference.py's recomputation from the
  undamaged rows, with no damage found;
* ``warned``: exit 0, figures equal to the recomputation, and a warning for the damage;

and never a traceback (exit 3 or anything else), a hang, a changed input or a new file beside
it. Anything else is a failure, named by its kind.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import reference
from damage import DAMAGEABLE, KERNEL, NVTX, READ_TABLES, files_of

#: Values written into cells: NULL, text, blobs, reals, and integers at and beyond every limit.
VALUES = (
    "NULL", "'abc'", "''", "X'00FF'", "X''", "CAST(X'ff41' AS TEXT)", "'decode[/]'", "'[bold red]x'",
    "1e30", "-1e30", "2.5", "-0.5", "-1", "0", "1", str(-(2**63)), str(2**63 - 1), str(2**62), str(2**53),
    str(2**53 - 1), str(2**40), str(2**32), str(2**31), str(-(2**24)), "9000000000000000000",
)
#: Rowids a row is moved to.
ROWIDS = (10**12, 9 * 10**18, 2**63 - 1, -1, -(2**63), 0, 400_001, 999_999_999)
#: Warnings the undamaged seed already carries (none): any other means damage was reported.
SEED_WARNINGS: tuple[str, ...] = ()

FAILURES = ("traceback", "hang", "changed input", "new file", "bad error", "wrong figures",
            "unwarned damage", "should have refused", "unverifiable")


def _sql(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    try:
        for s in statements:
            conn.execute(s)
        conn.commit()
    finally:
        conn.close()


def _rows(path: Path, table: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def mutate_trace(path: Path, rng: random.Random) -> list[str]:
    """Damage the export at ``path`` in place with one to three random mutations; returns what
    was done, one entry per mutation."""
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        done.append(_mutation(path, rng))
    return done


def _mutation(path: Path, rng: random.Random) -> str:
    table = rng.choice(tuple(DAMAGEABLE))
    column = rng.choice(DAMAGEABLE[table])
    value = rng.choice(VALUES)
    kind = rng.choices(
        ("cell", "cells", "column", "rowid", "delete", "duplicate", "drop column", "drop table", "session",
         "strings", "flip", "truncate"),
        weights=(30, 12, 4, 8, 5, 5, 3, 2, 4, 4, 18, 5))[0]
    try:
        n = _rows(path, table)
    except (sqlite3.Error, UnicodeDecodeError):  # an earlier mutation broke the file
        n = 0
    row = rng.randint(1, max(n, 1))
    k = rng.randint(2, 60)
    j = rng.randint(0, k - 1)
    if kind == "drop table":
        table = rng.choice(READ_TABLES)
    statements = {
        "cell": f"UPDATE {table} SET {column} = {value} WHERE rowid = {row}",
        "cells": f"UPDATE {table} SET {column} = {value} WHERE rowid % {k} = {j}",
        "column": f"UPDATE {table} SET {column} = {value}",
        "rowid": f"UPDATE OR REPLACE {table} SET rowid = {rng.choice(ROWIDS)} WHERE rowid = {row}",
        "delete": f"DELETE FROM {table} WHERE rowid % {k} = {j}",
        "duplicate": f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid = {row}",
        "drop column": f"ALTER TABLE {table} DROP COLUMN {column}",
        "drop table": f"DROP TABLE {table}",
        "session": f"UPDATE ANALYSIS_DETAILS SET {rng.choice(('stopTime', 'duration'))} = {value}",
        "strings": f"UPDATE StringIds SET value = {value} WHERE id = (SELECT shortName FROM {KERNEL} WHERE rowid = {row})",
    }
    try:
        if kind in statements:
            _sql(path, statements[kind])
        elif kind == "flip":
            data = bytearray(path.read_bytes())
            flips = [rng.randrange(len(data)) for _ in range(rng.choice((1, 1, 2, 4, 8)))]
            for at in flips:
                data[at] ^= 1 << rng.randrange(8)
            path.write_bytes(bytes(data))
            return f"flip bytes at {flips}"
        else:
            size = path.stat().st_size
            cut = rng.randrange(size)
            with open(path, "r+b") as fh:
                fh.truncate(cut)
            return f"truncate to {cut} of {size} bytes"
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # refused by the (damaged) file: recorded
        return f"{kind} {table}.{column} = {value}: not applied ({exc})"
    return f"{kind} {table}.{column} = {value} (row {row})" if kind != "drop table" else f"drop table {table}"


@dataclass
class Outcome:
    """What one case gave: ``kind`` is refused, correct, warned, or one of FAILURES."""

    kind: str
    detail: str = ""
    mutations: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def run_cli(*args: str) -> tuple[int, str, str]:
    """The gapscope command line in this process: (exit code, stdout, stderr)."""
    from gapscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # noqa: BLE001 - anything escaping main is a traceback
            return -1, out.getvalue(), f"Traceback: {type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def _one_line(code: int, err: str) -> str | None:
    """None when ``err`` is a proper refusal (exit 2, one error line), else what is wrong."""
    if code != 2:
        return f"exit {code}"
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("gapscope: error: "):
        return f"{len(lines)} lines: {err[:300]!r}"
    return None


def judge_trace(path: Path) -> Outcome:
    """Run ``gapscope analyze PATH -f json`` and judge the outcome (see the module docstring)."""
    folder = path.parent
    before = files_of(folder)
    code, out, err = run_cli("analyze", str(path), "-f", "json")
    after = files_of(folder)
    if code not in (0, 2) or "Traceback" in err:
        return Outcome("traceback", f"exit {code}: {err[-500:]}")
    if set(after) != set(before):
        return Outcome("new file", f"{sorted(set(after) ^ set(before))}")
    if after != before:
        return Outcome("changed input", "")
    if code == 2:
        wrong = _one_line(code, err)
        return Outcome("bad error", wrong) if wrong else Outcome("refused", err.strip())
    result = json.loads(out)
    try:
        want = reference.expected(str(path))
    except reference.Refused as exc:
        return Outcome("should have refused", str(exc))
    except (sqlite3.Error, KeyError, TypeError, ValueError) as exc:
        return Outcome("unverifiable", f"{type(exc).__name__}: {exc}")
    wrong = reference.mismatches(result, want)
    warned = [w for w in result["warnings"] if w not in SEED_WARNINGS]
    if wrong:
        return Outcome("wrong figures", "; ".join(wrong[:3]) + (f" (warned: {warned[0]})" if warned else ""))
    if any(want["damaged"].values()) and not warned:
        return Outcome("unwarned damage", f"{want['damaged']}")
    return Outcome("warned" if warned else "correct", warned[0] if warned else "")


def trace_case(seed_trace: Path, work: Path, seed: int) -> Outcome:
    """One trace case: a copy of ``seed_trace`` in a fresh folder under ``work``, damaged by
    the mutations of ``seed``, judged; the folder is removed afterwards."""
    rng = random.Random(seed)
    folder = work / f"case-{seed}"
    folder.mkdir(parents=True)
    try:
        path = folder / "trace.sqlite"
        shutil.copyfile(seed_trace, path)
        mutations = mutate_trace(path, rng)
        outcome = judge_trace(path)
        outcome.mutations = mutations
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# result JSONs and threshold specs

#: Replacement values for a field of a result JSON, as JSON text; those after OUT_OF_DOMAIN
#: are outside every figure's domain, so a figure given one must be refused (exit 2).
JSON_VALUES = ('null', '"x"', '[]', '{}', 'true', '0', '1', '0.5', '12345678901234567890123', '"decode[/]"',
               '"\\u001b[31mred"', '"\\udcff"')
OUT_OF_DOMAIN = ('NaN', 'Infinity', '-Infinity', '1e999', '-1', '7.5', '-1e300')
FIGURES = ("gap_fraction", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count", "kernels", "gap_p50_ns",
           "gap_max_ns", "kernel_median_ns")
METRIC_WORDS = ("gap_fraction", "gpu_span", "busy", "gap", "gap_count", "gap_p99", "kernels", "nope", "",
                "gap_fraction:gap_fraction")
LIMIT_WORDS = ("+0.02", "0.02", "+5%", "+50us", "+1ms", "off", "nan", "inf", "+1e999", "-1", "", "+", "%",
               "+-0", "+2pp", "1s", "+0x10", "×")
GLOB_WORDS = ("", "decode*", "[", "*", "aten::mm", "\x00", "é", "decode_step")


VALID_SPECS = ("gap_fraction:+0.02", "gpu_span:+5%", "decode*:gap_fraction:+0.01", "gap_p99:+50us", "busy:off",
               "kernels:+10", "gap_count:+5%", "[a-z]*:gap:+1ms")


def threshold_spec(rng: random.Random) -> str:
    """A random ``--fail`` spec: half of them valid, the others made of pieces, valid or not."""
    if rng.random() < 0.5:
        return rng.choice(VALID_SPECS)
    parts = [rng.choice(METRIC_WORDS), rng.choice(LIMIT_WORDS)]
    if rng.random() < 0.4:
        parts.insert(0, rng.choice(GLOB_WORDS))
    spec = ":".join(parts)
    if rng.random() < 0.1:
        spec = spec[: rng.randrange(len(spec) + 1)]
    return spec


def mutate_json(text: str, rng: random.Random) -> tuple[str, bool, str]:
    """(mutated JSON text, whether a figure was put outside its domain, what was done)."""
    data = json.loads(text)
    kind = rng.choices(("figure", "field", "drop field", "drop section", "schema", "deep", "bytes", "truncate",
                        "wrap", "name"), weights=(40, 15, 8, 5, 5, 4, 8, 5, 3, 7))[0]
    sections = [s for s in ("ranges", "by_name", "devices", "streams") if data.get(s)]
    section = rng.choice(sections)
    row = rng.randrange(len(data[section]))
    if kind == "figure":
        name = rng.choice(FIGURES)
        value = rng.choice(OUT_OF_DOMAIN if rng.random() < 0.5 else JSON_VALUES)
        outside = value in OUT_OF_DOMAIN and (value != "7.5" or name == "gap_fraction")
        data[section][row][name] = "SENTINEL"
        return json.dumps(data).replace('"SENTINEL"', value), outside, f"{section}[{row}].{name} = {value}"
    if kind == "field":
        key = rng.choice(list(data[section][row]))
        value = rng.choice(JSON_VALUES)
        data[section][row][key] = "SENTINEL"
        return json.dumps(data).replace('"SENTINEL"', value), False, f"{section}[{row}].{key} = {value}"
    if kind == "drop field":
        key = rng.choice(list(data[section][row]))
        del data[section][row][key]
        return json.dumps(data), False, f"del {section}[{row}].{key}"
    if kind == "drop section":
        key = rng.choice(list(data))
        del data[key]
        return json.dumps(data), False, f"del {key}"
    if kind == "schema":
        value = rng.choice(('"gapscope.analysis/2"', '"gapscope.analysis/3"', '"gapscope.fleet/1"', '"gapscope-run/1"', '"x/1"', '1', 'null'))
        data["schema"] = "SENTINEL"
        return json.dumps(data).replace('"SENTINEL"', value), False, f"schema = {value}"
    if kind == "deep":
        depth = rng.choice((70, 500, 5000, 200_000))
        data[section][row]["name"] = "SENTINEL"
        return json.dumps(data).replace('"SENTINEL"', "[" * depth + "]" * depth), False, f"nested {depth}"
    if kind == "name":
        value = rng.choice(('"decode[/]"', '"[bold red]x"', '"\\u001b]0;title\\u0007"', '"' + "n" * 5000 + '"',
                            '"a|b`c*d_e<b>"', '"\\ud800"'))
        data[section][row]["name"] = "SENTINEL"
        return json.dumps(data).replace('"SENTINEL"', value), False, f"{section}[{row}].name = {value[:40]}"
    if kind == "wrap":
        return json.dumps([data]), False, "wrapped in a list"
    raw = json.dumps(data)
    if kind == "truncate":
        cut = rng.randrange(len(raw))
        return raw[:cut], False, f"truncated at {cut}"
    b = bytearray(raw.encode())
    for _ in range(rng.choice((1, 2, 8))):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return b.decode("utf-8", "surrogateescape"), False, "bytes replaced"


def judge_json(base: Path, path: Path, out_dir: Path, must_refuse: bool, specs: list[str]) -> Outcome:
    """Run analyze (JSON, table), report and compare (with ``specs``) on a mutated result JSON."""
    folder = path.parent
    before = files_of(folder)
    runs = [("analyze", str(path), "-f", "json"), ("analyze", str(path)),
            ("report", str(path), "-o", str(out_dir / "r.md"), "--no-figures"),
            ("compare", str(base), str(path), *[a for s in specs for a in ("--fail", s)])]
    codes = []
    for args in runs:
        code, out, err = run_cli(*args)
        if code not in (0, 1, 2) or "Traceback" in err or (code == 1 and args[0] != "compare"):
            return Outcome("traceback", f"{args[0]}: exit {code}: {err[-400:]}")
        if code == 2 and _one_line(code, err):
            return Outcome("bad error", f"{args[0]}: {_one_line(code, err)}")
        codes.append(code)
    after = files_of(folder)
    if after != before:
        return Outcome("changed input" if set(after) == set(before) else "new file", "")
    if must_refuse and codes != [2, 2, 2, 2]:  # a figure outside its domain: bad input everywhere
        return Outcome("should have refused", f"exit codes {codes}")
    return Outcome("refused" if codes[0] == 2 else "correct", f"exit codes {codes}")


def json_case(base_text: str, work: Path, seed: int) -> Outcome:
    """One JSON case: a mutated copy of ``base_text`` (a result JSON of the fuzz seed) and two
    random threshold specs, judged; the folder is removed afterwards."""
    rng = random.Random(seed)
    folder = work / f"json-{seed}"
    (folder / "out").mkdir(parents=True)
    try:
        base = folder / "base.json"
        base.write_text(base_text, encoding="utf-8")
        text, must_refuse, what = mutate_json(base_text, rng)
        path = folder / "mutated.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        specs = [threshold_spec(rng), threshold_spec(rng)]
        outcome = judge_json(base, path, folder / "out", must_refuse, specs)
        outcome.mutations = [what, *map(repr, specs)]
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    """How many outcomes of each kind."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.kind] = counts.get(o.kind, 0) + 1
    return counts


def describe(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON-ready data."""
    return {"kind": outcome.kind, "detail": outcome.detail, "mutations": outcome.mutations}
