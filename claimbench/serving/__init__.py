"""The OpenAI-compatible HTTP server: building and running it (server.py, serve_setup.py), what a
running server holds (state.py) and tenants' keys (tenants.py); the HTTP API (api/), the engine
behind it (engine_loop/), health and metrics (monitoring/), and sending it a workload
(clients/)."""
