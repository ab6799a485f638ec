"""`gapscope mcp`: serve the analysis to coding agents over the Model Context Protocol (stdio;
gapscope.agent.server, docs/agents.md)."""

from __future__ import annotations

import sys

import click

from gapscope.cli import cli
from gapscope.cli.options import cache_option, cache_setting
from gapscope.errors import GapscopeError

#: What to install for `gapscope mcp`, said in one line when the SDK is missing.
NEEDS = ("gapscope mcp needs the MCP Python SDK, version 2 (mcp>=2,<3), which is not installed: "
         "pip install -e '.[mcp]' in gapscope's checkout (the extra gapscope[mcp])")


def require_sdk() -> None:
    """GapscopeError, in one line naming the extra, when the MCP SDK (2.x) cannot be imported."""
    try:
        from mcp.server import MCPServer  # noqa: F401 - the 2.x server; 1.x has FastMCP instead
    except ImportError:
        raise GapscopeError(NEEDS) from None


@cli.command("mcp")
@cache_option
def mcp_command(no_cache: bool) -> None:
    """Serve gapscope to AI agents: an MCP server on stdin and stdout.

    An MCP client (Claude Code, Claude Desktop, Cursor, VS Code, ...) starts it as a subprocess;
    its tools are analyze, compare, top_gaps, explain and formats, its resources the metric and
    verdict definitions (docs/agents.md has the client configuration). Needs the extra
    gapscope[mcp] (pip install -e '.[mcp]').
    """
    require_sdk()
    from gapscope.agent.server import serve

    if sys.stdin.isatty():
        click.echo("gapscope mcp: an MCP server on stdin and stdout, for an MCP client to start "
                   "(docs/agents.md); Ctrl-C ends it", err=True)
    try:
        with cache_setting(no_cache):
            serve()
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None
