"""Least privilege: what each MCP tool needs, and the scopes an agent may hold.

read    claims, scores, calibration, stored runs, budget, env, one's own jobs
check   doctor, tpu_check, a running server's readiness and metrics
run     run claims, score, build the site, warm the compilation cache, cancel one's jobs
spend   anything the ledger prices above zero (a run on a metered chip), on top of run
"""

from __future__ import annotations

READ = "read"
CHECK = "check"
RUN = "run"
SPEND = "spend"
SCOPES = (READ, CHECK, RUN, SPEND)
DEFAULT_SCOPES = (READ,)

# Each tool's own scope; spend is added per call by the run tool's price (server.py).
TOOL_SCOPES: dict[str, str] = {
    "list_claims": READ,
    "show_claim": READ,
    "get_scores": READ,
    "list_runs": READ,
    "get_budget": READ,
    "get_env": READ,
    "job_status": READ,
    "doctor": CHECK,
    "tpu_check": CHECK,
    "server_health": CHECK,
    "server_metrics": CHECK,
    "run_claims": RUN,
    "score": RUN,
    "build_site": RUN,
    "warm_cache": RUN,
    "job_cancel": RUN,
}


def check_scopes(scopes: object, where: str) -> tuple[str, ...]:
    """``scopes`` as a tuple of known scope names, or ValueError naming ``where`` and the bad
    one. Order is kept, duplicates dropped."""
    if not isinstance(scopes, list) or not scopes:
        raise ValueError(f"{where}: scopes must be a non-empty list of {', '.join(SCOPES)}")
    for scope in scopes:
        if scope not in SCOPES:
            raise ValueError(f"{where}: unknown scope {scope!r}; known: {', '.join(SCOPES)}")
    return tuple(dict.fromkeys(scopes))


def missing_scopes(held: tuple[str, ...], needed: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes of ``needed`` that ``held`` lacks, in ``needed``'s order."""
    return tuple(s for s in needed if s not in held)
