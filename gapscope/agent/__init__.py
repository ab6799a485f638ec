"""gapscope for coding agents: `gapscope mcp`, a Model Context Protocol server over the same
analysis (docs/agents.md).

``summary`` makes the compact, paged views of a result the tools return; ``docs`` reads the
documentation the package ships (the metric and verdict definitions an agent cites); ``tools``
holds each tool as a plain function, a thin call of the library; ``server`` registers them with
the MCP Python SDK (version 2, the optional extra ``gapscope[mcp]``) and serves them over stdio.
Only ``server`` imports the SDK.
"""
