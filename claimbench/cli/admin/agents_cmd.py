"""`claimbench agents`: the agents of `claimbench mcp` (tokens stored as sha256, scopes)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import console, err_console, fail
from claimbench.ops.scopes import DEFAULT_SCOPES, SCOPES

app = typer.Typer(help="Agents of `claimbench mcp`: tokens and scopes.", no_args_is_help=True)

FileOption = Annotated[Path, typer.Option("--file", help="The agents file.")]


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Agent name.")],
    file: FileOption = Path("agents.yaml"),
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            metavar="SCOPE",
            help=f"A scope to grant (repeatable): {', '.join(SCOPES)}. "
            f"Default: {', '.join(DEFAULT_SCOPES)}.",
        ),
    ] = None,
) -> None:
    """Add an agent with a new token (the file is created if missing); the token is printed
    once, on its own line, and only its hash is stored."""
    from claimbench.ops.agents import add_agent

    try:
        token = add_agent(file, name, scope)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    scopes = ", ".join(scope or DEFAULT_SCOPES)
    err_console.print(
        f"agent {name!r} ({scopes}) added to {file}; its token (shown only now):", highlight=False
    )
    print(token)


@app.command("list")
def list_agents(file: FileOption = Path("agents.yaml")) -> None:
    """The agents of an agents file and their scopes (tokens are never shown)."""
    from claimbench.ops.agents import Agents

    try:
        agents = Agents.load(file)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    for agent in agents.agents:
        console.print(f"{agent.name}: {', '.join(agent.scopes)}", highlight=False)
