"""The HTTP API: OpenAI-compatible schemas and routes, chat templates, output as the client sees
it, streaming, errors, and the bounds on what one request may make the server read."""
