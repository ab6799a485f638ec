"""Build a large SYNTHETIC export by tiling a real one: every tile is a copy of the source's
kernels, memcpy/memset, runtime calls, synchronizations and NVTX ranges, shifted in time by one
source span and in correlation id by the source's largest id. Only the tables gapscope reads are
copied. The output is synthetic (named so in its META_DATA_EXPORT) and never goes in traces/.
With ``--distinct-names`` every tile after the first appends `` #<tile>`` to its inline NVTX range
names, so that no two tiles share a name.

A parquetdir or arrowdir export (a folder) is tiled the same way, table by table with pyarrow,
into a folder of the same format: the same shift, the same tiles, so a SQLite export and a
columnar export of one report tile to the same data.

    python benchmarks/tile_trace.py SOURCE.sqlite OUT.sqlite --kernels 1000000
    python benchmarks/tile_trace.py SOURCE_parquet/ OUT_parquet/ --kernels 1000000
"""

from __future__ import annotations

import argparse
import math
import shutil
import sqlite3
import time
from pathlib import Path

TIME_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
)
COPY_TABLES = ("StringIds", "TARGET_INFO_GPU", "ThreadNames", "TARGET_INFO_CUDA_STREAM",
               "TARGET_INFO_CUDA_CONTEXT_INFO")


def tile(source: Path, out: Path, kernels: int, distinct_names: bool = False) -> int:
    """Write ``out`` with at least ``kernels`` kernel rows; returns the number of tiles."""
    if out.exists():
        out.unlink()
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    n_kernels = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    t0, t1 = src.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    r0, r1 = src.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    shift = max(t1, r1) - min(t0, r0) + 1_000_000
    corr_shift = src.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    n_tiles = math.ceil(kernels / n_kernels)
    meta_table = "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables else "EXPORT_META_DATA"
    schemas = dict(src.execute("SELECT name, sql FROM sqlite_master WHERE type='table'"))
    src.close()

    dst = sqlite3.connect(out)
    dst.execute("PRAGMA journal_mode=OFF")
    dst.execute("PRAGMA synchronous=OFF")
    dst.execute(f"ATTACH DATABASE 'file:{source}?mode=ro' AS src")
    dst.execute(f"CREATE TABLE META_DATA_EXPORT AS SELECT * FROM src.{meta_table}")
    dst.execute("UPDATE META_DATA_EXPORT SET value = value || ' (SYNTHETIC tiled x' || ? || ')' "
                "WHERE name = 'EXPORT_PRODUCT_VERSION'", (n_tiles,))
    dst.execute("CREATE TABLE tiles (k INTEGER)")
    dst.executemany("INSERT INTO tiles VALUES (?)", [(k,) for k in range(n_tiles)])
    for table in COPY_TABLES:
        if table in tables:
            dst.execute(schemas[table])
            dst.execute(f"INSERT INTO {table} SELECT * FROM src.{table}")
    for table in TIME_TABLES:
        if table not in tables:
            continue
        dst.execute(schemas[table])
        cols = [r[1] for r in dst.execute(f"PRAGMA src.table_info({table})")]
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f"s.{c} + t.k * {shift}")
            elif c == "correlationId":
                exprs.append(f"s.{c} + t.k * {corr_shift}")
            elif c == "text" and table == "NVTX_EVENTS" and distinct_names:
                exprs.append(f"CASE WHEN t.k = 0 OR s.{c} IS NULL THEN s.{c} ELSE s.{c} || ' #' || t.k END")
            else:
                exprs.append(f"s.{c}")
        dst.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM tiles t, src.{table} s "
                    f"ORDER BY t.k, s.start")
    dst.execute("DROP TABLE tiles")
    dst.commit()
    dst.execute("DETACH DATABASE src")
    dst.close()
    return n_tiles


def _columnar_io(folder: Path):
    """(suffix, read, write) for a parquetdir or arrowdir export folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if any(folder.glob("*.parquet")):
        return ".parquet", pq.read_table, lambda table, path: pq.write_table(table, path, compression="snappy")

    def read(path: Path):
        with pa.OSFile(str(path), "rb") as fh:
            return pa.ipc.open_stream(fh).read_all()

    def write(table, path: Path) -> None:
        with pa.OSFile(str(path), "wb") as fh, pa.ipc.new_stream(fh, table.schema) as out:
            out.write_table(table)

    return ".arrow", read, write


def tile_columnar(source: Path, out: Path, kernels: int) -> int:
    """Write the folder ``out`` (same format as the folder ``source``) with at least ``kernels``
    kernel rows, tiled as :func:`tile` tiles a SQLite export; returns the number of tiles."""
    import pyarrow as pa
    import pyarrow.compute as pc

    suffix, read, write = _columnar_io(source)
    tables = {p.name[: -len(suffix)] for p in source.glob(f"*{suffix}")}
    kern = read(source / f"CUPTI_ACTIVITY_KIND_KERNEL{suffix}")
    calls = read(source / f"CUPTI_ACTIVITY_KIND_RUNTIME{suffix}")
    t0 = min(pc.min(kern["start"]).as_py(), pc.min(calls["start"]).as_py())
    t1 = max(pc.max(kern["end"]).as_py(), pc.max(calls["end"]).as_py())
    shift = t1 - t0 + 1_000_000
    corr_shift = pc.max(calls["correlationId"]).as_py() + 1
    n_tiles = math.ceil(kernels / kern.num_rows)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    meta = read(source / f"META_DATA_EXPORT{suffix}")
    values = [v + f" (SYNTHETIC tiled x{n_tiles})" if n == "EXPORT_PRODUCT_VERSION" else v
              for n, v in zip(meta["name"].to_pylist(), meta["value"].to_pylist())]
    write(meta.set_column(meta.schema.get_field_index("value"), meta.schema.field("value"),
                          pa.array(values, meta.schema.field("value").type)), out / f"META_DATA_EXPORT{suffix}")
    for table in COPY_TABLES:
        if table in tables:
            shutil.copy(source / f"{table}{suffix}", out / f"{table}{suffix}")
    for table in TIME_TABLES:
        if table not in tables:
            continue
        src = read(source / f"{table}{suffix}")
        order = pc.sort_indices(src, [("start", "ascending")])  # tile order as tile()'s ORDER BY
        src = src.take(order)
        parts = []
        for k in range(n_tiles):
            cols = []
            for name, col in zip(src.column_names, src.columns):
                by = shift if name in ("start", "end") else corr_shift if name == "correlationId" else 0
                cols.append(pc.add(col, pa.scalar(k * by, col.type)) if by else col)
            parts.append(pa.Table.from_arrays(cols, schema=src.schema))
        write(pa.concat_tables(parts).combine_chunks(), out / f"{table}{suffix}")
    return n_tiles


#: The shipped columnar exports whose column types a converted export takes (nsys's own types:
#: some 32-bit, which a reader decodes into less memory than int64).
TYPE_SOURCES = {".parquet": Path(__file__).resolve().parents[1] / "traces" / "torch_decode_small_parquet",
                ".arrow": Path(__file__).resolve().parents[1] / "traces" / "torch_decode_small_arrow"}


def to_columnar(source: Path, out: Path, suffix: str) -> Path:
    """Write every table of the SQLite export ``source`` into the folder ``out`` as a SYNTHETIC
    parquetdir (``suffix`` ".parquet") or arrowdir (".arrow") export: the same rows, each column
    of the type nsys's own columnar export of traces/torch_decode_small.nsys-rep gives it (the
    type SQLite's values suggest for a column that export lacks). For exports nsys was not run
    on here to export again: a report's own columnar exports are what to tile when there is one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, read, write = _columnar_io(TYPE_SOURCES[suffix])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            cur = src.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
            ref = TYPE_SOURCES[suffix] / f"{table}{suffix}"
            types = {}
            if ref.is_file():
                schema = pq.read_schema(ref) if suffix == ".parquet" else read(ref).schema
                types = {f.name: f.type for f in schema}
            columns = [[row[i] for row in rows] for i in range(len(names))]
            arrays = []
            for name, values in zip(names, columns):
                try:
                    arrays.append(pa.array(values, types.get(name)))
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                    arrays.append(pa.array(values))  # nsys's type does not hold this export's values
            write(pa.Table.from_arrays(arrays, names=names), out / f"{table}{suffix}")
    finally:
        src.close()
    return out


def cached_tiling(source: Path, kernels: int, workdir: Path, distinct_names: bool = False) -> Path:
    """A tiling of ``source`` (a SQLite export, or a parquetdir/arrowdir folder) to ``kernels``
    kernels in ``workdir``, made once and reused (``distinct_names``: every tile's NVTX ranges
    renamed apart, SQLite only)."""
    workdir.mkdir(parents=True, exist_ok=True)
    folder = source.is_dir()
    if folder and distinct_names:
        raise ValueError("distinct_names tiles a SQLite export only")
    tag = "-distinct" if distinct_names else ""
    big = workdir / (f"{source.name}-x{kernels}.synthetic" if folder
                     else f"{source.stem}-x{kernels}{tag}.synthetic.sqlite")
    if not big.exists():
        print(f"tiling {source} to {kernels:,} kernels -> {big} ...", flush=True)
        if folder:
            tile_columnar(source, big, kernels)
        else:
            tile(source, big, kernels, distinct_names)
    return big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--distinct-names", action="store_true", help="no two tiles share an NVTX range name")
    args = ap.parse_args()
    t = time.perf_counter()
    if args.source.is_dir():
        if args.distinct_names:
            raise SystemExit("--distinct-names tiles a SQLite export only")
        n = tile_columnar(args.source, args.out, args.kernels)
    else:
        n = tile(args.source, args.out, args.kernels, args.distinct_names)
    size = sum(p.stat().st_size for p in args.out.iterdir()) if args.out.is_dir() else args.out.stat().st_size
    print(f"wrote {args.out} ({n} tiles of {args.source.name}, {size / 1e6:.0f} MB) in "
          f"{time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
