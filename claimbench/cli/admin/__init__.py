"""Commands that administer a running server's access: its tenants and their keys, its
agents, and the audit log of what they asked for."""
