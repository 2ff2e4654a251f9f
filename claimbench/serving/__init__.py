"""The OpenAI-compatible HTTP server: FastAPI app, the engine process and its client, tenants'
keys, limits, SSE streaming, health, metrics and the supervisor."""
