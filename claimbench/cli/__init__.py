"""The ``claimbench`` Typer commands: parse options, build configs, call library functions,
print.

``main`` joins the commands into one app; ``common``, ``project`` and ``extras`` are shared by
all of them. The commands live in subpackages by concern:

- ``claims``: list, show, run, score, site, history, budget (the claims project and its results);
- ``serving``: serve, generate, bench, engine, mcp (the serving engine);
- ``admin``: tenants, agents, audit (access to a running server);
- ``machine``: model, env, roofline, doctor, tpu-check (the host and its models).
"""
