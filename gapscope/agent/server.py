"""`gapscope mcp`: the tools of gapscope.agent.tools and the docs of gapscope.agent.docs served
over the Model Context Protocol (stdio), on the official Python SDK, version 2 (docs/agents.md).

Every tool answers with structured content (the summary's dict, which names the result's
schema) and a short text. Bad input answers with a tool error whose text is the one line the
command line prints (a GapscopeError's message); a bug with the command line's internal-error
line, never a traceback. Each call runs on a worker thread (anyio's), so an analysis of a
large trace leaves the event loop free: other calls are read and answered meanwhile.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resources import FunctionResource
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field, ValidationError

from gapscope import __version__
from gapscope.agent import docs, tools
from gapscope.agent.summary import MAX_PAGE, PAGE
from gapscope.errors import GapscopeError, internal_error_line
from gapscope.text import one_line

#: What a tool returns: a CallToolResult whose structured content is one JSON object.
Result = Annotated[CallToolResult, dict[str, Any]]
#: Every tool only reads (the cache's entries aside) and reaches nothing outside the machine.
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)
INSTRUCTIONS = (
    "gapscope measures CUDA launch gaps in Nsight Systems and PyTorch profiler traces: what share of "
    "the GPU timeline is idle between kernels, why (launch calls, host code between them, stalls, "
    "setup, syncs, waits on other streams, copies, device turnaround) and whether CUDA Graphs would "
    "help. Start with analyze(path); explain(path, range) and top_gaps(path) look closer; compare("
    "baseline, current) says in words whether gaps regressed; formats() says what gapscope reads and "
    "how to record a trace. Paths are files on this machine (relative ones from the server's working "
    "folder). Every figure and verdict is defined in the resource gapscope://docs/metrics.md: cite it.")

_Path = Annotated[str, Field(description="A trace (nsys SQLite export, parquetdir or arrowdir folder, "
                                         ".nsys-rep, PyTorch profiler .json[.gz]) or a result JSON saved by "
                                         "gapscope analyze -f json")]
_Ranges = Annotated[str | list[str] | None, Field(description="Only NVTX ranges with this name or glob "
                                                              "('decode*'), or any of several (--range)")]


class _Server(MCPServer):
    """The SDK's server, its tools' argument errors said in one line, as the command line's usage
    errors are (the SDK's own message is pydantic's, over several lines)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            said = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                             for e in exc.__cause__.errors())
            raise ToolError(one_line(f"{name}: {said}")) from exc.__cause__


def _answer(call: Callable[[], tools.Answer]) -> CallToolResult:
    """A tool's answer, or its error: the GapscopeError's line, or the internal-error line of a bug."""
    try:
        made, text = call()
    except GapscopeError as exc:
        return CallToolResult(content=[TextContent(type="text", text=exc.message)], is_error=True)
    except Exception as exc:  # noqa: BLE001 - a bug: one line saying so, as the command line does
        return CallToolResult(content=[TextContent(type="text", text=internal_error_line(exc, __version__))],
                              is_error=True)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=made)


async def _off_loop(call: Callable[[], tools.Answer]) -> CallToolResult:
    """``call`` answered on a worker thread, the event loop free meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(_answer, call))


async def analyze(path: _Path, ranges: _Ranges = None,
                  domains: Annotated[str | list[str] | None, Field(
                      description="Only NVTX ranges of this domain ('default' for the default one), or of "
                                  "any of several (--domain)")] = None,
                  window: Annotated[str | None, Field(
                      description="Only this time window START:END from the trace's first GPU activity, in ns "
                                  "or with a unit (2s:5s, 100ms:; --window)")] = None,
                  limit: Annotated[int, Field(description=f"Range names listed, most gap time first "
                                                          f"(1 to {MAX_PAGE})")] = PAGE,
                  offset: Annotated[int, Field(description="Range names skipped first: the previous "
                                                           "answer's by_name.next_offset")] = 0) -> Result:
    """Analyze a trace as `gapscope analyze` does. Returns the result's schema, the trace, a page of
    the NVTX range names with the most gap time (gap fraction, span, verdict and reading, CUDA Graph
    ceiling), every device, why the GPU sat idle (each row's gap time by category, as shares), the
    measured graph payoff, the launch APIs, and the "answer" block (cause, predicted CUDA Graph
    speedup and its range, measured replay, one-off costs left out).
    Definitions: gapscope://docs/metrics.md."""
    return await _off_loop(lambda: tools.analyze(path, ranges, domains, window, limit, offset))


async def compare(baseline: Annotated[str | list[str], Field(
                      description="Baseline run: a result JSON, a trace or a gapscope run folder; several "
                                  "compare their medians")],
                  current: Annotated[str | list[str], Field(description="Current run(s), likewise")],
                  thresholds: Annotated[str | list[str] | None, Field(
                      description="Limits over the defaults, as --fail takes them: 'gap_fraction:+0.02', "
                                  "'decode*:gpu_span:+5%', 'verdict:same' (gapscope://docs/ci.md)")] = None,
                  scope: Annotated[str | None, Field(description="Some of range,device,stream (--scope)")] = None,
                  missing: Annotated[str | None, Field(
                      description="A baseline range current lacks: fail, warn or ignore (--missing)")] = None,
                  ) -> Result:
    """Compare launch gaps of a current run against a baseline as `gapscope compare` does (CI's
    check). Returns passed, the headline, each failure in words ('range graph: sync time 0 -> 2.64
    ms: a new host synchronize'), the failing checks with their values and limits, and the
    thresholds in force. A regression is an answer (passed: false), not an error."""
    return await _off_loop(lambda: tools.compare(baseline, current, thresholds, scope, missing))


async def top_gaps(path: _Path,
                   range: Annotated[str | None, Field(description="Only the work of the NVTX ranges with "
                                                                  "this name or glob")] = None,
                   n: Annotated[int, Field(description=f"How many gaps (1 to {tools.MAX_GAPS})")] = 10) -> Result:
    """The longest device-level gaps of a trace (of one range's work, or the whole trace's),
    longest first: start, length, largest category and the split by category, device and stream,
    the kernel before and after, and the CUDA call that launched the one after."""
    return await _off_loop(lambda: tools.top_gaps(path, range, n))


async def explain(path: _Path,
                  range: Annotated[str, Field(description="An NVTX range name or glob, as analyze lists them")],
                  ) -> Result:
    """Look closely at one NVTX range name: its figures and verdict with the rules of
    gapscope://docs/metrics.md that give that verdict, why it sat idle, its instances with the
    most gap time, its graph payoff, the launch APIs that launched its work (host time per call,
    latency) and its longest gaps with their causes and launching calls."""
    return await _off_loop(lambda: tools.explain(path, range))


async def formats() -> Result:
    """What gapscope reads (trace formats, saved results) and how to record a trace it reads well:
    the nsys options and export, `gapscope profile`, torch.profiler's settings."""
    return await _off_loop(tools.formats)


def build() -> MCPServer:
    """The server: its tools and the docs as resources (``gapscope://docs/NAME``)."""
    server = _Server("gapscope", title="gapscope", version=__version__, instructions=INSTRUCTIONS,
                     log_level="WARNING")
    for tool in (analyze, compare, top_gaps, explain, formats):
        server.add_tool(tool, annotations=READ_ONLY, structured_output=True)
    for name, description in docs.DOCS.items():
        server.add_resource(FunctionResource(uri=docs.uri(name), name=name, description=description,
                                             mime_type="text/markdown", fn=functools.partial(docs.read, name)))
    return server


def serve() -> None:
    """Serve over stdin and stdout until the client closes them."""
    build().run("stdio")
