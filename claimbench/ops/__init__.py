"""Agent ops: the runbook as MCP tools (`claimbench mcp`), agents' scopes, the audit log, jobs."""
