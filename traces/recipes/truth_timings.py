"""Add the wall files of a record_truth.py part to traces/truth/timings.json.

    python3 traces/recipes/truth_timings.py truth_e/ PART

For every `NAME_wall.json` of the folder whose `NAME.sqlite` (nsys) or `NAME.pt.trace.json.gz`
(torch.profiler) is beside it, one entry of timings.json's `traces`: the case, the tracer, the
graph trace level (nsys: `graph` when NAME holds `graphlevel`, else `node`), the part that
recorded it, the traced wall time per step of each phase and the untraced timings of the same
process before and after the traced pass, as graph_truth.py wrote them. Existing entries are
kept (new ones are added at the end); an entry of the same name is replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TIMINGS = Path(__file__).resolve().parents[1] / "truth" / "timings.json"


def entries(folder: Path, part: str) -> dict[str, dict]:
    out = {}
    for wall in sorted(folder.glob("*_wall.json")):
        stem = wall.name[: -len("_wall.json")]
        w = json.loads(wall.read_text())
        if "untraced" not in w:
            continue
        for name, tracer in ((f"{stem}.sqlite", "nsys"),
                             (f"{stem.removesuffix('_torch')}.pt.trace.json.gz", "torch")):
            if (folder / name).is_file() and w.get("tracer") == ("torch" if tracer == "torch" else "nvtx"):
                out[name] = {
                    "case": w["case"], "tracer": tracer,
                    "graph_trace": None if tracer == "torch" else ("graph" if "graphlevel" in stem else "node"),
                    "recording": part,
                    "traced_step_s": {"eager": w["eager_traced_step_s"], "graph": w["graph_traced_step_s"]},
                    "untraced": w["untraced"],
                }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("part")
    args = ap.parse_args()
    data = json.loads(TIMINGS.read_text())
    new = entries(args.folder, args.part)
    data["traces"].update(new)
    TIMINGS.write_text(json.dumps(data, indent=1))
    print(f"{len(new)} entries: " + ", ".join(new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
