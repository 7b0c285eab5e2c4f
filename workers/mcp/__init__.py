"""MCP servers' tools for agents (``mcp_tools``), through the gate and the ledger.

Rooms: ``config`` (the operator's servers file), ``catalog`` (names, effects,
fingerprints), ``pool`` (one asyncio loop thread per process owning a session per
server), ``runtime`` (one upstream call, a server's listing), ``tools`` (``McpTool``,
``mcp_tools``), ``guard`` (drift, reviews), ``pins`` (``airlock mcp list|pin``).
Nothing is imported here: the SDK loads only where MCP is used.
"""
