"""Compare two folders written by tools/json_snapshot.py, byte by byte.

    python tools/json_diff.py BEFORE AFTER

Prints one line per file that differs or is in one folder only (for JSON, the first key path
whose value differs), then a count. Exit status 1 when anything differs, 0 when every file is
byte-identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def first_difference(a: Any, b: Any, where: str = "$") -> str:
    """The first key path at which two JSON values differ, with both values (cut)."""
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'after' if k not in a else 'before'}"
            if a[k] != b[k]:
                return first_difference(a[k], b[k], f"{where}.{k}")
        return f"{where}: key order"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{where}[{i}]")
        return f"{where}: same values, other bytes"
    return f"{where}: {str(a)[:80]!r} != {str(b)[:80]!r}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    names = sorted({p.name for p in args.before.iterdir()} | {p.name for p in args.after.iterdir()})
    differ = 0
    for name in names:
        a, b = args.before / name, args.after / name
        if not a.exists() or not b.exists():
            print(f"{name}: only in {'after' if not a.exists() else 'before'}")
            differ += 1
            continue
        x, y = a.read_bytes(), b.read_bytes()
        if x == y:
            continue
        differ += 1
        if name.endswith(".json"):
            print(f"{name}: {first_difference(json.loads(x), json.loads(y))}")
        else:
            print(f"{name}: differs ({len(x):,} bytes before, {len(y):,} after)")
    print(f"{len(names) - differ} of {len(names)} files byte-identical, {differ} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
