"""Summary table of what record_wave2.sh recorded: one line per file, then the ranges in each.

    python3 traces/recipes/wave2_summary.py DIR

For every *.sqlite (read-only, python's sqlite3): bytes, rows of CUPTI_ACTIVITY_KIND_KERNEL,
those with a graphNodeId (kernels launched by a CUDA graph), rows of
CUPTI_ACTIVITY_KIND_GRAPH_TRACE, memcpy rows, NVTX ranges (push/pop and start/end rows of
NVTX_EVENTS), the export schema; then the ranges by domain and name (emit_nvtx names cut at the
first comma). For every *.json.gz chrome trace of the PyTorch profiler: bytes, events by category
and its user annotations. For every folder (parquetdir, arrowdir exports): files and bytes. Other
files: bytes.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import sqlite3
import sys
from collections import Counter

PUSH_POP, START_END, DOMAIN_CREATE = 59, 60, 75


def sqlite_lines(f: pathlib.Path) -> tuple[str, list[str]]:
    con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}

        def count(t: str, where: str = "") -> int:
            if t not in tables:
                return 0
            try:
                return con.execute(f"select count(*) from {t} {where}").fetchone()[0]
            except sqlite3.Error:
                return -1

        meta = {}
        if "META_DATA_EXPORT" in tables:
            meta = dict(con.execute("select name, value from META_DATA_EXPORT"))
        ranges = count("NVTX_EVENTS", f"where eventType in ({PUSH_POP}, {START_END})")
        line = (f"{f.name:40} {f.stat().st_size:>10} {count('CUPTI_ACTIVITY_KIND_KERNEL'):>8} "
                f"{count('CUPTI_ACTIVITY_KIND_KERNEL', 'where graphNodeId is not null'):>7} "
                f"{count('CUPTI_ACTIVITY_KIND_GRAPH_TRACE'):>6} "
                f"{count('CUPTI_ACTIVITY_KIND_MEMCPY'):>6} {ranges:>7}  "
                f"{meta.get('EXPORT_SCHEMA_VERSION', '?')}")
        details = []
        if "NVTX_EVENTS" in tables:
            cols = {r[1] for r in con.execute("pragma table_info(NVTX_EVENTS)")}
            text = "e.text" if "text" in cols else "NULL"
            join = ""
            if "textId" in cols and "StringIds" in tables:
                text, join = f"coalesce({text}, s.value)", " left join StringIds s on s.id = e.textId"
            dom = "e.domainId" if "domainId" in cols else "0"
            domains = {d: n for d, n in con.execute(
                f"select {dom}, {text} from NVTX_EVENTS e{join} where e.eventType = {DOMAIN_CREATE}")}
            rows = con.execute(
                f"select {dom}, {text}, count(*) from NVTX_EVENTS e{join} "
                f"where e.eventType in ({PUSH_POP}, {START_END}) group by 1, 2").fetchall()
            by = Counter()
            for d, name, c in rows:
                key = (domains.get(d, "default" if not d else f"domain {d}"),
                       (name or "?").split(",")[0])
                by[key] += c
            per_domain: dict[str, list[str]] = {}
            for (d, name), c in sorted(by.items(), key=lambda kv: (-kv[1], kv[0])):
                per_domain.setdefault(d, []).append(f"{name} x{c}")
            for d, names in per_domain.items():
                shown = ", ".join(names[:8]) + (f", ... ({len(names)} names)" if len(names) > 8 else "")
                details.append(f"    ranges [{d}]: {shown}")
        return line, details
    finally:
        con.close()


def chrome_lines(f: pathlib.Path) -> tuple[str, list[str]]:
    with gzip.open(f, "rt") as fh:
        data = json.load(fh)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    cats = Counter(e.get("cat", "-") for e in events if isinstance(e, dict))
    ann = Counter(e.get("name") for e in events
                  if isinstance(e, dict) and e.get("cat") == "user_annotation")
    kernels = cats.get("kernel", 0)
    line = (f"{f.name:40} {f.stat().st_size:>10} {kernels:>8} {'-':>7} {'-':>6} "
            f"{cats.get('gpu_memcpy', 0):>6} {sum(ann.values()):>7}  chrome trace, "
            f"{len(events)} events")
    details = ["    categories: " + ", ".join(f"{k} {v}" for k, v in cats.most_common())]
    if ann:
        details.append("    user annotations: " + ", ".join(f"{k} x{v}" for k, v in ann.items()))
    return line, details


def main() -> int:
    d = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    print(f"{'file':40} {'bytes':>10} {'kernels':>8} {'graph':>7} {'gtrace':>6} {'memcpy':>6} "
          f"{'ranges':>7}  schema")
    print("  (graph: kernels with a graphNodeId; gtrace: CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows; "
          "ranges: NVTX push/pop + start/end rows, all domains)")
    details_all = []
    for f in sorted(d.iterdir()):
        if f.name == "summary.txt":  # this table itself, being written
            continue
        try:
            if f.suffix == ".sqlite":
                line, details = sqlite_lines(f)
            elif f.name.endswith(".json.gz"):
                line, details = chrome_lines(f)
            elif f.is_dir():
                files = [p for p in f.rglob("*") if p.is_file()]
                line = (f"{f.name + '/':40} {sum(p.stat().st_size for p in files):>10} "
                        f"{len(files)} files")
                details = []
            else:
                line, details = f"{f.name:40} {f.stat().st_size:>10}", []
        except Exception as exc:  # noqa: BLE001 - a summary never stops on one bad file
            line, details = f"{f.name:40} unreadable: {type(exc).__name__}: {exc}", []
        print(line)
        details_all.append((f.name, details))
    for name, details in details_all:
        if details:
            print(name)
            print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
