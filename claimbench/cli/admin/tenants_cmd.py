"""`claimbench tenants`: manage the server's tenants file (API keys stored as sha256)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import console, err_console, fail

app = typer.Typer(
    help="Tenants of `claimbench serve`: API keys and their limits.", no_args_is_help=True
)

FileOption = Annotated[Path, typer.Option("--file", help="The tenants file.")]


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Tenant id.")],
    file: FileOption = Path("tenants.yaml"),
    priority: Annotated[int | None, typer.Option(help="Tier; 0 = highest.")] = None,
    weight: Annotated[float | None, typer.Option(help="Fair-share weight.")] = None,
    guaranteed_pages: Annotated[int | None, typer.Option(help="KV pages reserved.")] = None,
    burst_pages: Annotated[int | None, typer.Option(help="Shared KV pages at most.")] = None,
    max_queued_requests: Annotated[
        int | None, typer.Option(help="Waiting requests at most.")
    ] = None,
    max_queued_tokens: Annotated[int | None, typer.Option(help="Waiting tokens at most.")] = None,
    token_rate: Annotated[float | None, typer.Option(help="Admitted tokens per second.")] = None,
    token_burst: Annotated[float | None, typer.Option(help="Token bucket size.")] = None,
    ttft_slo_s: Annotated[float | None, typer.Option(help="TTFT objective (s).")] = None,
    tpot_slo_s: Annotated[float | None, typer.Option(help="TPOT objective (s).")] = None,
) -> None:
    """Add a tenant with a new API key (the file is created if missing); the key is printed
    once, on its own line, and only its hash is stored."""
    from claimbench.serving.tenants import add_tenant

    settings = {
        "priority": priority,
        "weight": weight,
        "guaranteed_pages": guaranteed_pages,
        "burst_pages": burst_pages,
        "max_queued_requests": max_queued_requests,
        "max_queued_tokens": max_queued_tokens,
        "token_rate": token_rate,
        "token_burst": token_burst,
        "ttft_slo_s": ttft_slo_s,
        "tpot_slo_s": tpot_slo_s,
    }
    try:
        key = add_tenant(file, name, settings)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    err_console.print(
        f"tenant {name!r} added to {file}; its API key (shown only now):", highlight=False
    )
    print(key)


@app.command("list")
def list_tenants(file: FileOption = Path("tenants.yaml")) -> None:
    """The tenants of a tenants file and their settings (keys are never shown)."""
    from claimbench.platform.printable import printable
    from claimbench.serving.tenants import SETTINGS, TenantKeys

    try:
        keys = TenantKeys.load(file)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    for tenant in keys.tenants:
        num_keys = sum(t == tenant.id for t in keys.key_hashes.values())
        settings = ", ".join(f"{s}={getattr(tenant, s)}" for s in SETTINGS)
        # A name from the file may hold terminal control characters: shown escaped.
        line = printable(f"{tenant.id} ({num_keys} key(s)): {settings}")
        console.print(line, highlight=False)
