"""Damaged parquetdir and arrowdir exports (issue 41): every table and column the columnar
reader needs is checked against the type it expects before use, and damage follows the SQLite
reader's rules: a missing or mistyped column the reader needs is an unknown schema (one line,
exit 2), a NULL cell is damage counted in the warning (the row left out, or its value read as
unknown), a NULL name reads as empty, text that is not UTF-8 is kept with U+FFFD.

Each test rewrites one table of a copy of a shipped export with pyarrow (SYNTHETIC damage of a
real export; the files in traces/ are never changed) and, where the trace is still read, holds
the figures and the warning to the SQLite export of the same report damaged the same way by SQL
(the formats' equality is tests/test_formats.py's).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from clirun import assert_one_line_error, gapscope
from paths import TRACES

EXPORTS = {"parquet": TRACES / "torch_decode_small_parquet", "arrow": TRACES / "torch_decode_small_arrow"}
SQLITE = TRACES / "torch_decode_small.sqlite"


def read_table(folder: Path, table: str) -> pa.Table:
    path = folder / f"{table}.{'parquet' if folder.name.endswith('parquet') else 'arrow'}"
    if path.suffix == ".parquet":
        return pq.read_table(path)
    return ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()  # not mapped: it is rewritten


def write_table(folder: Path, table: str, data: pa.Table) -> None:
    path = folder / f"{table}.{'parquet' if folder.name.endswith('parquet') else 'arrow'}"
    if path.suffix == ".parquet":
        pq.write_table(data, path)
        return
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)


def damaged(tmp_path: Path, fmt: str, table: str, change) -> Path:
    """A copy of the shipped ``fmt`` export with ``table`` replaced by ``change(table)``."""
    folder = tmp_path / EXPORTS[fmt].name
    shutil.copytree(EXPORTS[fmt], folder)
    write_table(folder, table, change(read_table(folder, table)))
    return folder


def set_column(data: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return data.set_column(data.column_names.index(name), name, values)


def analyze(path: Path) -> dict:
    proc = gapscope("analyze", str(path), "-f", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def sqlite_damaged(tmp_path: Path, statements: list[str]) -> Path:
    """The SQLite export of the same report, damaged by SQL the same way."""
    from damage import loosen

    copy = tmp_path / "same.sqlite"
    shutil.copyfile(SQLITE, copy)
    with sqlite3.connect(copy) as conn:
        for table in {s.split()[1] for s in statements}:
            loosen(conn, table)
        for statement in statements:
            conn.execute(statement)
    conn.close()
    return copy


def figures(result: dict) -> dict:
    """What both exports must agree on: every section but the trace's own description."""
    return {k: v for k, v in result.items() if k not in ("trace", "schema")}


@pytest.mark.parametrize("fmt", EXPORTS)
@pytest.mark.parametrize("table, column", [("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
                                           ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                                           ("NVTX_EVENTS", "eventType"), ("StringIds", "id"),
                                           ("StringIds", "value"), ("META_DATA_EXPORT", "value")])
def test_a_table_without_a_column_it_needs_is_refused_in_one_line(tmp_path, fmt, table, column):
    folder = damaged(tmp_path, fmt, table, lambda t: t.drop_columns([column]))
    proc = gapscope("analyze", str(folder), "--no-cache")
    assert_one_line_error(proc, f"unknown export schema: {table} lacks column(s) {column}")


@pytest.mark.parametrize("fmt", EXPORTS)
@pytest.mark.parametrize("table, column, kind", [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", "integers"), ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName", "integers"),
    ("NVTX_EVENTS", "eventType", "integers"), ("NVTX_EVENTS", "text", "text"), ("StringIds", "id", "integers"),
    ("StringIds", "value", "text"), ("META_DATA_EXPORT", "name", "text"), ("TARGET_INFO_GPU", "id", "integers"),
])
def test_a_column_of_another_type_is_refused_in_one_line(tmp_path, fmt, table, column, kind):
    """Text where integers belong, numbers where text belongs: an unknown schema."""
    def retyped(t: pa.Table) -> pa.Table:
        values = t.column(column)
        other = (pa.array([str(v) for v in values.to_pylist()], pa.string()) if kind == "integers"
                 else pa.array([float(i) for i in range(len(values))], pa.float64()))
        return set_column(t, column, other)

    folder = damaged(tmp_path, fmt, table, retyped)
    proc = gapscope("analyze", str(folder), "--no-cache")
    assert_one_line_error(proc, f"unknown export schema: {table}.{column} holds ")
    assert f"where {kind} belong" in proc.stderr


@pytest.mark.parametrize("fmt", EXPORTS)
def test_null_names_read_as_empty_as_in_sqlite(tmp_path, fmt):
    """StringIds.value NULL (every name): the SQLite reader reads a NULL name as empty text (an
    NVTX range's as no name); so does the columnar one, and the figures are the SQLite ones."""
    folder = damaged(tmp_path, fmt, "StringIds",
                     lambda t: set_column(t, "value", pa.nulls(t.num_rows, t.schema.field("value").type)))
    expected = analyze(sqlite_damaged(tmp_path, ["UPDATE StringIds SET value = NULL"]))
    got = analyze(folder)
    assert figures(got) == figures(expected)
    assert {k["name"] for k in got["top_gaps"] if "name" in k} <= {""}


@pytest.mark.parametrize("fmt", EXPORTS)
def test_null_cells_are_counted_damage_as_in_sqlite(tmp_path, fmt):
    """NULL in columns the analysis needs (a kernel's start, a call's correlation id): the same
    rows left out or tied to nothing as the SQLite export damaged the same way, with the same
    warnings, which name NULL as the reason."""
    def nulled(t: pa.Table, column: str, rows: range) -> pa.Table:
        values = t.column(column).to_pylist()
        for i in rows:
            values[i] = None
        return set_column(t, column, pa.array(values, t.schema.field(column).type))

    folder = damaged(tmp_path, fmt, "CUPTI_ACTIVITY_KIND_KERNEL", lambda t: nulled(t, "start", range(3, 9)))
    write_table(folder, "CUPTI_ACTIVITY_KIND_RUNTIME",
                nulled(read_table(folder, "CUPTI_ACTIVITY_KIND_RUNTIME"), "correlationId", range(0, 40, 4)))
    expected = analyze(sqlite_damaged(tmp_path, [
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid BETWEEN 4 AND 9",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE (rowid - 1) % 4 = 0 AND rowid <= 40"]))
    got = analyze(folder)
    assert figures(got) == figures(expected)
    assert any("left out 6 of " in w and "(start NULL: 6)" in w for w in got["warnings"])


@pytest.mark.parametrize("fmt", EXPORTS)
def test_range_text_that_is_not_utf8_is_kept_and_warned(tmp_path, fmt):
    def undecodable(t: pa.Table) -> pa.Table:
        text = [None if v is None else v.encode() for v in t.column("text").to_pylist()]
        first = next(i for i, v in enumerate(text) if v)
        text[first] = b"\xffdecode"
        return set_column(t, "text", pa.array(text, pa.binary()))

    got = analyze(damaged(tmp_path, fmt, "NVTX_EVENTS", undecodable))
    assert any("had a damaged name (not UTF-8 text: 1): kept, shown with U+FFFD" in w for w in got["warnings"])


@pytest.mark.parametrize("fmt", EXPORTS)
def test_gpu_rows_with_a_null_id_are_left_out_of_the_names(tmp_path, fmt):
    folder = damaged(tmp_path, fmt, "TARGET_INFO_GPU",
                     lambda t: set_column(t, "id", pa.nulls(t.num_rows, t.schema.field("id").type)))
    assert figures(analyze(folder))["devices"] == figures(analyze(EXPORTS[fmt]))["devices"]


def test_an_arrow_file_with_damaged_offsets_is_one_line(tmp_path):
    """Found by the fuzz campaign (column export seed 131: a flipped bit in META_DATA_EXPORT.arrow's
    string offsets): the memory-mapped buffers were read unchecked and a value read raised
    SystemError (exit 3). What is read is now validated first: refused in one line."""
    from mutations import columnar_case, columnar_seed

    seeds = {fmt: columnar_seed(tmp_path / "seeds", fmt) for fmt in ("parquet", "arrow")}
    outcome = columnar_case(seeds, {"parquet": set(), "arrow": set()}, tmp_path, 131)
    assert outcome.mutations == ["flip META_DATA_EXPORT.arrow"]
    assert outcome.kind == "refused", (outcome.kind, outcome.detail)
    assert "META_DATA_EXPORT.arrow: cannot read the META_DATA_EXPORT table" in outcome.detail
