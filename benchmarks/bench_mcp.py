"""Benchmark: `gapscope mcp` answering other calls while it analyzes a large trace.

Starts `gapscope mcp` (stdio, through the MCP SDK's own client, caches in a fresh folder) and
times, on a SYNTHETIC export of --kernels kernels (tiled from a real trace, built once and cached
in --workdir, benchmarks/tile_trace.py):

* ``start``: the server's start and the protocol's handshake;
* ``floor``: ``formats()`` calls with the server idle: one call's round trip, nothing else running;
* ``during``: the same calls, one every EVERY (0.1 s), made while ``analyze(BIG)`` runs (the
  first analysis of the trace: read, analyzed, kept in the result cache);
* ``analyze``: that analysis's call, from request to answer; ``analyze again``: the same call
  answered from the result cache.

A call made during the analysis waits for the event loop (were the analysis on it, until the
analysis ended) and for the interpreter's lock, which the analysis's numpy and Arrow work
releases most of the time. The table prints the median and the longest round trip of each.

    python benchmarks/bench_mcp.py [--kernels 1000000]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, big_trace  # noqa: E402

#: The pause between two calls made during the analysis, in seconds.
EVERY = 0.1


def main() -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    args, big = big_trace(__doc__ or "")

    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="gapscope-bench-mcp-") as xdg:
            env = {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": xdg, "GAPSCOPE_NO_CACHE": ""}
            params = StdioServerParameters(command=sys.executable, args=["-m", "gapscope", "mcp"], env=env, cwd=ROOT)
            started = time.perf_counter()
            async with Client(params, read_timeout_seconds=600) as client:
                rows = [("start", [time.perf_counter() - started])]

                async def round_trip() -> float:
                    t = time.perf_counter()
                    answer = await client.call_tool("formats", {})
                    assert not answer.is_error
                    return time.perf_counter() - t

                rows.append(("floor (idle)", [await round_trip() for _ in range(20)]))
                during: list[float] = []
                analyzed: list[float] = []

                async def analyze() -> None:
                    t = time.perf_counter()
                    answer = await client.call_tool("analyze", {"path": str(big)})
                    analyzed.append(time.perf_counter() - t)
                    assert not answer.is_error, answer.content

                async with anyio.create_task_group() as group:
                    group.start_soon(analyze)
                    await anyio.sleep(EVERY)
                    while not analyzed:
                        during.append(await round_trip())
                        await anyio.sleep(EVERY)
                rows.append(("during analyze", during))
                rows.append(("analyze (miss)", analyzed))
                t = time.perf_counter()
                answer = await client.call_tool("analyze", {"path": str(big)})
                assert answer.structured_content["cached"] is True
                rows.append(("analyze again (hit)", [time.perf_counter() - t]))
        print(f"{'what':<22}{'calls':>6}{'median':>10}{'longest':>10}")
        for what, times in rows:
            print(f"{what:<22}{len(times):>6}{statistics.median(times) * 1e3:>8.1f}ms{max(times) * 1e3:>8.1f}ms")

    anyio.run(run)


if __name__ == "__main__":
    main()
