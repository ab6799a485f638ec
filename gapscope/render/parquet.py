"""The per-gap and per-activity tables as Parquet files (`gapscope analyze --format parquet -o
DIR`): ``DIR/gaps.parquet`` and ``DIR/kernels.parquet``, for pandas, Polars, DuckDB or Spark.

Names are dictionary-encoded columns (a kernel's name is stored once, not once per row); a
missing value (no activity before a gap, work no range launched) is a null. Each file's
key-value metadata holds ``gapscope`` (a JSON object: the tables' ``schema``, the
``gapscope_version``, and the result's ``trace`` and ``options``); docs/schema.md lists the
columns. Unlike the other renderers, whose ``file`` is an open text file, this one's is the
folder to write into: two tables do not fit one stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gapscope import __version__
from gapscope.analysis.tables import TABLES_SCHEMA, ActivityTables
from gapscope.files import folder, together, written

#: The files written, by table.
FILES = {"gaps": "gaps.parquet", "kernels": "kernels.parquet"}


def metadata(tables: ActivityTables) -> bytes:
    """The ``gapscope`` metadata value of both files."""
    return json.dumps({"schema": TABLES_SCHEMA, "gapscope_version": __version__, "trace": tables.trace,
                       "options": tables.options}).encode()


def render(tables: ActivityTables, file: str | Path, **_: Any) -> None:
    """Write ``gaps.parquet`` and ``kernels.parquet`` into the folder ``file`` (created if
    missing; files of those names in it are replaced, each whole or not at all)."""
    with together():  # both tables, or neither (nor the folder made for them)
        out = folder(file)
        for key, name in FILES.items():
            table = pa.Table.from_pandas(getattr(tables, key), preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"gapscope": metadata(tables)})
            with written(out / name, binary=True) as fh:
                pq.write_table(table, fh)
