"""The engine behind the server: the thread or process that owns the LLMEngine and steps it, the
server's client of that process, and the supervisor that restarts it."""
