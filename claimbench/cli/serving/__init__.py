"""Commands that drive the serving engine: serve it over HTTP, generate text, benchmark it,
inspect its configuration, and expose the runbook as MCP tools."""
