"""`python -m claimbench`: the CLI, for a source tree on PYTHONPATH with no entry point."""

from claimbench.cli.main import app

app(prog_name="claimbench")
