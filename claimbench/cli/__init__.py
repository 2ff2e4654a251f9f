"""The ``claimbench`` Typer commands: parse options, build configs, call library functions,
print."""
