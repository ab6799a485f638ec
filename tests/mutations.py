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

A PyTorch profiler case (:func:`kineto_case`) mutates a small SYNTHETIC cut of a shipped trace's
JSON (field values past every limit, fields and events dropped or repeated, nesting, long names,
bytes, a cut file; as ``.json`` or ``.json.gz``, whose compressed bytes are damaged too); a
column export case (:func:`columnar_case`) a copy of the shipped parquetdir or arrowdir export
cut to the tables gapscope reads (NULL cells, values at every limit, columns of another type,
dropped or renamed columns and tables, empty tables, flipped bytes, cut or garbage files). No
recomputation is held to those: they must end refused with one line, or analyzed (``warned``
when a warning beyond the seed's own was given, else ``correct``), with the same never-list.
Every case names its mutations' classes (``Outcome.classes``), so the campaign counts failures
by class: those of :data:`KINETO_READER_CLASSES` are the PyTorch profiler reader's own bounds.
"""

from __future__ import annotations

import contextlib
import gzip
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
    classes: list[str] = field(default_factory=list)

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
    return {"kind": outcome.kind, "detail": outcome.detail, "mutations": outcome.mutations,
            "classes": outcome.classes}


# --------------------------------------------------------------------------------------------
# traces without a recomputation: PyTorch profiler JSON, nsys column exports


def judge_run(path: Path, seed_warnings: set[str], twin: Path | None = None) -> Outcome:
    """Run ``gapscope analyze PATH -f json`` (a file, or an export folder) and judge what it did:
    never a traceback, a changed input or a file made beside it (or in it); refused with one
    line, or analyzed (``warned`` when it says more than ``seed_warnings``). ``twin``: a SQLite
    copy of the same rows (:func:`columnar_as_sqlite`), made after the run, whose recomputation
    (tests/reference.py) the figures, the damage warned and a refusal the rules ask for are
    held to, as for a SQLite trace."""
    watched = path.parent
    before = {"beside": files_of(watched), "in": files_of(path) if path.is_dir() else {}}
    code, out, err = run_cli("analyze", str(path), "-f", "json")
    after = {"beside": files_of(watched), "in": files_of(path) if path.is_dir() else {}}
    if code not in (0, 2) or "Traceback" in err:
        return Outcome("traceback", f"exit {code}: {err[-500:]}")
    if any(set(after[k]) != set(before[k]) for k in after):
        return Outcome("new file", f"{sorted(set(after['beside']) ^ set(before['beside']))} "
                                   f"{sorted(set(after['in']) ^ set(before['in']))}")
    if after != before:
        return Outcome("changed input", "")
    if code == 2:
        wrong = _one_line(code, err)
        return Outcome("bad error", wrong) if wrong else Outcome("refused", err.strip())
    result = json.loads(out)
    extra = [w for w in result["warnings"] if w not in seed_warnings]
    if twin is not None:
        columnar_as_sqlite(path, twin)
        try:
            want = reference.expected(str(twin))
        except reference.Refused as exc:
            return Outcome("should have refused", str(exc))
        except (sqlite3.Error, KeyError, TypeError, ValueError) as exc:
            return Outcome("unverifiable", f"{type(exc).__name__}: {exc}")
        wrong = reference.mismatches(result, want)
        if wrong:
            return Outcome("wrong figures", "; ".join(wrong[:3]) + (f" (warned: {extra[0]})" if extra else ""))
        if any(want["damaged"].values()) and not extra:
            return Outcome("unwarned damage", f"{want['damaged']}")
    return Outcome("warned" if extra else "correct", extra[0] if extra else "")


#: The PyTorch profiler events gapscope reads, by category, and the fields it reads of them.
KINETO_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation",
                     "cuda_sync")
KINETO_FIELDS = ("ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "args.device", "args.stream",
                 "args.correlation")
#: Values put in a field, as JSON text: those of OVERFLOW are numbers past int64 once converted
#: to integer nanoseconds (or read as ids).
KINETO_VALUES = ("null", '"abc"', '""', "[]", "{}", "true", "2.5", "-0.5", "-1", "0", "1", '"1"', '"decode[/]"',
                 '"\\u001b[31m\\u0007\\r"', '"\\u202e"', '"\\ud800"', str(-(2**31)), str(2**31), str(2**53),
                 str(2**40), str(-(2**24)), "1e-300")
OVERFLOW = ("1e30", "-1e30", str(-(2**63)), str(2**63 - 1), str(2**64), str(2**70), str(-(2**70)), "1e308",
            "123456789012345678901234567890")
#: Mutation classes whose failures are the PyTorch profiler reader's own bounds (issue 41's
#: depth, int64 and string-length items, on another branch): counted apart by the campaign and
#: left out of the suite's slice until that reader is merged.
KINETO_READER_CLASSES = ("deep", "overflow", "huge name")


def kineto_seed() -> str:
    """The PyTorch profiler seed's JSON text: traces/torch_decode_steps.pt.trace.json.gz (a
    shipped trace), as it is."""
    from paths import TRACES

    return gzip.decompress((TRACES / "torch_decode_steps.pt.trace.json.gz").read_bytes()).decode("utf-8")


def _kineto_value(rng: random.Random, reader: bool) -> tuple[str, str]:
    """(a value as JSON text, its class)."""
    if reader and rng.random() < 0.3:
        return rng.choice(OVERFLOW), "overflow"
    return rng.choice(KINETO_VALUES), "value"


def _set_field(event: dict, name: str, marker: str) -> None:
    if name.startswith("args."):
        args = event.get("args")
        if not isinstance(args, dict):
            args = event["args"] = {}
        args[name[5:]] = marker
    else:
        event[name] = marker


def mutate_kineto(text: str, rng: random.Random, reader: bool = True) -> tuple[bytes, list[str], list[str], bool]:
    """(the mutated trace's bytes, what was done, the mutations' classes, whether to write it
    gzipped) for the seed's JSON ``text``; ``reader``: also the classes of KINETO_READER_CLASSES."""
    data = json.loads(text)
    events = data["traceEvents"]
    gz = rng.random() < 0.5
    done, classes, raw = [], [], {}
    for n in range(rng.choice((1, 1, 1, 2, 3))):
        marker = f"@@{n}@@"
        kinds = ["value", "values", "drop field", "drop events", "duplicate", "top", "nested", "long name",
                 "bytes", "truncate", "not utf-8"] + (["deep", "huge name"] if reader else [])
        weights = [30, 10, 8, 5, 4, 5, 2, 2, 10, 5, 2] + ([3, 1] if reader else [])
        kind = rng.choices(kinds, weights=weights)[0]
        ours = [e for e in events if isinstance(e, dict) and e.get("cat") in KINETO_CATEGORIES]
        event = rng.choice(ours) if ours else (events[0] if events and isinstance(events[0], dict) else {})
        name = rng.choice(KINETO_FIELDS)
        if kind == "value":
            raw[marker], cls = _kineto_value(rng, reader)
            _set_field(event, name, marker)
            done.append(f"{event.get('cat')}.{name} = {raw[marker][:40]}")
        elif kind == "values":
            cat, k = rng.choice(KINETO_CATEGORIES), rng.randint(1, 8)
            raw[marker], cls = _kineto_value(rng, reader)
            for e in [e for e in ours if e.get("cat") == cat][::k]:
                _set_field(e, name, marker)
            done.append(f"every {k}th {cat}.{name} = {raw[marker][:40]}")
        elif kind == "drop field":
            if name.startswith("args.") and isinstance(event.get("args"), dict):
                event["args"].pop(name[5:], None)
            else:
                event.pop(name, None)
            cls = "structure"
            done.append(f"del {event.get('cat')}.{name}")
        elif kind == "drop events":
            cat, k = rng.choice(KINETO_CATEGORIES), rng.randint(1, 5)
            gone = {id(e) for e in [e for e in ours if e.get("cat") == cat][::k]}
            events[:] = [e for e in events if id(e) not in gone]
            cls = "structure"
            done.append(f"del every {k}th {cat}")
        elif kind == "duplicate":
            events.extend(json.loads(json.dumps(e)) for e in rng.sample(ours, min(len(ours), rng.randint(1, 50))))
            cls = "structure"
            done.append("duplicated events")
        elif kind == "top":
            key = rng.choice(("traceEvents", "schemaVersion", "deviceProperties", "baseTimeNanoseconds"))
            raw[marker], cls = _kineto_value(rng, reader)
            data[key] = marker
            if key == "traceEvents":
                events = []
            cls = "structure" if cls == "value" else cls
            done.append(f"{key} = {raw[marker][:40]}")
        elif kind in ("nested", "deep"):
            depth = rng.choice((10, 60, 100)) if kind == "nested" else rng.choice((1000, 5000, 30000))
            raw[marker] = '{"x":' * depth + "1" + "}" * depth
            event["unused"] = marker
            cls = "value" if kind == "nested" else "deep"
            done.append(f"an unused key nested {depth} deep")
        elif kind in ("long name", "huge name"):
            size = rng.choice((1_000, 100_000)) if kind == "long name" else rng.choice((10 << 20, 50 << 20))
            event["name"] = "n" * size
            cls = "value" if kind == "long name" else "huge name"
            done.append(f"a name of {size:,} characters")
        else:
            cls = "bytes"
            done.append(kind)
        classes.append(cls)
    body = json.dumps(data)
    for marker, value in raw.items():
        body = body.replace(f'"{marker}"', value)
    payload = body.encode("utf-8", "surrogatepass")
    for kind in done:
        if kind == "bytes":
            b = bytearray(payload)
            for _ in range(rng.choice((1, 2, 8))):
                b[rng.randrange(len(b))] = rng.randrange(256)
            payload = bytes(b)
        elif kind == "truncate":
            payload = payload[: rng.randrange(len(payload))]
        elif kind == "not utf-8":
            at = payload.find(b'"name": "')
            payload = payload[: at + 9] + b"\xff\xfe" + payload[at + 9:] if at >= 0 else payload
    if gz:
        payload = gzip.compress(payload, compresslevel=1)
        if rng.random() < 0.15:
            b = bytearray(payload)
            if rng.random() < 0.5:
                b = b[: rng.randrange(10, len(b))]
                done.append("gzip cut")
            else:
                for _ in range(rng.choice((1, 4))):
                    b[rng.randrange(10, len(b))] ^= 1 << rng.randrange(8)
                done.append("gzip bytes flipped")
            payload = bytes(b)
            classes.append("gzip")
    return payload, done, classes, gz


def kineto_case(seed_text: str, seed_warnings: set[str], work: Path, seed: int, reader: bool = True) -> Outcome:
    """One PyTorch profiler case: the seed mutated by ``seed``'s mutations, written as
    ``.pt.trace.json`` or ``.pt.trace.json.gz`` in a fresh folder under ``work``, judged; the
    folder is removed afterwards. ``reader``: the reader's own classes may be drawn too."""
    rng = random.Random(seed)
    folder = work / f"kineto-{seed}"
    folder.mkdir(parents=True)
    try:
        payload, done, classes, gz = mutate_kineto(seed_text, rng, reader)
        path = folder / ("trace.pt.trace.json.gz" if gz else "trace.pt.trace.json")
        path.write_bytes(payload)
        outcome = judge_run(path, seed_warnings)
        outcome.mutations, outcome.classes = done, classes
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: The tables of an nsys export gapscope reads (the column export seed keeps only these).
COLUMNAR_TABLES = ("META_DATA_EXPORT", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                   "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS",
                   "TARGET_INFO_GPU", "ANALYSIS_DETAILS")
COLUMNAR_INTS = (-(2**63), 2**63 - 1, -1, 0, 1, 2**31, 2**32, 2**40, 2**53, -(2**24), 9 * 10**18)


def columnar_seed(folder: Path, fmt: str) -> Path:
    """A copy of the shipped ``parquet`` or ``arrow`` export of torch_decode_small cut to the
    tables gapscope reads (a SYNTHETIC cut of a real export), in ``folder``."""
    from paths import TRACES

    source = TRACES / f"torch_decode_small_{fmt}"
    target = folder / f"seed_{fmt}"
    target.mkdir(parents=True, exist_ok=True)
    for table in COLUMNAR_TABLES:
        path = source / f"{table}.{fmt}"
        if path.is_file():
            shutil.copyfile(path, target / path.name)
    return target


def _read_table(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = pa.py_buffer(path.read_bytes())  # not mapped: the file is rewritten
    if path.suffix == ".parquet":
        return pq.read_table(pa.BufferReader(data))
    return pa.ipc.open_stream(data).read_all()


def _write_table(path: Path, table: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pq.write_table(table, path)
        return
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _retyped(column: Any, rng: random.Random) -> tuple[Any, str]:
    import pyarrow as pa

    values = column.to_pylist()
    to = rng.choice(("string", "float64", "binary", "bool", "list", "null", "dictionary", "int8", "uint64"))
    if to == "string":
        return pa.array([None if v is None else str(v) for v in values], pa.string()), to
    if to == "float64":
        return pa.array([float(i) * 0.5 for i in range(len(values))], pa.float64()), to
    if to == "binary":
        return pa.array([None if v is None else str(v).encode() + b"\xff" for v in values], pa.binary()), to
    if to == "bool":
        return pa.array([i % 2 == 0 for i in range(len(values))], pa.bool_()), to
    if to == "list":
        return pa.array([[i] for i in range(len(values))], pa.list_(pa.int64())), to
    if to == "null":
        return pa.nulls(len(values)), to
    if to == "dictionary":
        return pa.array([None if v is None else str(v) for v in values], pa.string()).dictionary_encode(), to
    if to == "int8":
        return pa.array([i % 100 for i in range(len(values))], pa.int8()), to
    return pa.array([i * 2**40 for i in range(len(values))], pa.uint64()), to


def mutate_columnar(folder: Path, rng: random.Random) -> list[str]:
    """Damage the export folder in place with one to three random mutations; what was done."""
    import pyarrow as pa

    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        files = sorted(p for p in folder.iterdir() if p.is_file())
        if not files:
            break
        path = rng.choice(files)
        kind = rng.choices(("null cells", "value", "retype", "drop column", "rename column", "duplicate column",
                            "drop table", "empty table", "delete rows", "duplicate rows", "flip", "truncate",
                            "garbage", "empty file", "other format"),
                           weights=(18, 14, 10, 8, 3, 2, 5, 3, 5, 3, 12, 6, 3, 2, 2))[0]
        try:
            if kind in ("flip", "truncate", "garbage", "empty file", "drop table", "other format"):
                data = bytearray(path.read_bytes())
                if kind == "flip":
                    for _ in range(rng.choice((1, 2, 8))):
                        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
                elif kind == "truncate":
                    data = data[: rng.randrange(len(data))]
                elif kind == "garbage":
                    data = bytearray(rng.randbytes(rng.randint(1, 4096)))
                elif kind == "empty file":
                    data = bytearray()
                if kind == "drop table":
                    path.unlink()
                elif kind == "other format":
                    table = _read_table(path)
                    other = path.with_suffix(".arrow" if path.suffix == ".parquet" else ".parquet")
                    _write_table(other, table)
                    other.replace(path)
                else:
                    path.write_bytes(bytes(data))
                done.append(f"{kind} {path.name}")
                continue
            table = _read_table(path)
            if not table.num_columns:
                continue
            i = rng.randrange(table.num_columns)
            name = table.column_names[i]
            column = table.column(i)
            n = table.num_rows
            if kind == "null cells":
                k, j = rng.randint(1, 20), rng.randrange(20)
                values = column.to_pylist()
                for r in range(n):
                    if r % k == j % k:
                        values[r] = None
                table = table.set_column(i, name, pa.array(values, column.type))
            elif kind == "value" and n:
                if pa.types.is_integer(column.type):
                    values = column.cast(pa.int64(), safe=False).to_pylist()
                    values[rng.randrange(n)] = rng.choice(COLUMNAR_INTS)
                    table = table.set_column(i, name, pa.array(values, pa.int64()))
                else:
                    values = column.to_pylist()
                    values[rng.randrange(n)] = rng.choice(("", "\x1b[31m\u202e", "n" * 10_000, "decode[/]"))
                    table = table.set_column(i, name, pa.array(values, pa.large_string()))
            elif kind == "retype":
                new, to = _retyped(column, rng)
                table = table.set_column(i, name, new)
                kind = f"retype to {to}"
            elif kind == "drop column":
                table = table.remove_column(i)
            elif kind == "rename column":
                table = table.rename_columns([c if c != name else name + "_x" for c in table.column_names])
            elif kind == "duplicate column":
                table = table.append_column(name, column)
            elif kind == "empty table":
                table = table.slice(0, 0)
            elif kind == "delete rows":
                k = rng.randint(2, 10)
                table = table.filter(pa.array([r % k != 0 for r in range(n)]))
            elif kind == "duplicate rows":
                table = pa.concat_tables([table, table.slice(0, rng.randint(1, max(n, 1)))])
            _write_table(path, table)
            done.append(f"{kind} {path.name}.{name}")
        except (pa.ArrowException, OSError, ValueError, TypeError, IndexError) as exc:  # the file is damaged already
            done.append(f"{kind} {path.name}: not applied ({type(exc).__name__})")
    return done


def columnar_as_sqlite(folder: Path, target: Path) -> Path:
    """The rows of a column export's tables written into a SQLite file at ``target``, each value
    as it is (columns without a declared type: no conversion; unsigned 64-bit values wrapped as
    SQLite keeps them, booleans as 0 and 1, other values as their JSON text): the twin
    tests/reference.py recomputes from. Tables and columns that cannot be read (or whose length
    is not the table's) are left out (one the analysis needs could not have been read by gapscope
    either)."""
    target.unlink(missing_ok=True)
    conn = sqlite3.connect(target)
    try:
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".parquet", ".arrow") or not path.is_file():
                continue
            columns = {}
            try:
                for name, column in _columns_read(path):
                    columns.setdefault(name, [_sqlite_value(v) for v in column.to_pylist()])
            except Exception:  # noqa: BLE001 - an unreadable table: left out
                continue
            lengths = [len(v) for v in columns.values()]
            if not lengths:
                continue
            rows = max(set(lengths), key=lengths.count)  # a damaged column chunk may say another length
            columns = {name: v for name, v in columns.items() if len(v) == rows}
            names = list(columns)
            quoted = ", ".join('"' + n.replace('"', '""') + '"' for n in names)
            conn.execute(f'CREATE TABLE "{path.stem}" ({quoted})')
            conn.executemany(f'INSERT INTO "{path.stem}" VALUES ({", ".join("?" * len(names))})',
                             list(zip(*columns.values())))
        conn.commit()
    finally:
        conn.close()
    return target


def _columns_read(path: Path) -> list[tuple[str, Any]]:
    """(name, column) of every column of a table file that reads, each checked on its own (one
    damaged column leaves the others readable, as gapscope reads only the columns it needs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = pa.py_buffer(path.read_bytes())
    if path.suffix != ".parquet":
        table = pa.ipc.open_stream(data).read_all()
        out = []
        for name, column in zip(table.column_names, table.columns):
            try:
                column.validate(full=True)
            except Exception:  # noqa: BLE001 - that column is damaged: left out
                continue
            out.append((name, column))
        return out
    out = []
    for name in pq.read_schema(pa.BufferReader(data)).names:
        try:
            table = pq.read_table(pa.BufferReader(data), columns=[name])
            table.validate(full=True)
        except Exception:  # noqa: BLE001 - that column is damaged: left out
            continue
        out += list(zip(table.column_names, table.columns))
    return out


def _sqlite_value(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v - (1 << 64) if v >= 1 << 63 else v
    if v is None or isinstance(v, (float, str, bytes)):
        return v
    return json.dumps(v, default=str)


def columnar_case(seeds: dict[str, Path], seed_warnings: dict[str, set[str]], work: Path, seed: int) -> Outcome:
    """One column export case: a copy of the parquetdir seed (even ``seed``) or the arrowdir
    seed (odd) in a fresh folder under ``work``, damaged by ``seed``'s mutations, judged; the
    folder is removed afterwards."""
    rng = random.Random(seed)
    fmt = "parquet" if seed % 2 == 0 else "arrow"
    folder = work / f"columnar-{seed}"
    folder.mkdir(parents=True)
    try:
        path = folder / f"export_{fmt}"
        shutil.copytree(seeds[fmt], path)
        mutations = mutate_columnar(path, rng)
        outcome = judge_run(path, seed_warnings[fmt], twin=work / f"columnar-{seed}.twin.sqlite")
        outcome.mutations, outcome.classes = mutations, [fmt]
        return outcome
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        (work / f"columnar-{seed}.twin.sqlite").unlink(missing_ok=True)
