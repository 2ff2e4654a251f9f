"""The engine loop's named diagnostics: what a test or a probe may ask of a running engine.

The server's routes never need them; tests of the server and the engine loop do (the
newest request's tokens and prefix hits, requests per tenant, pages in use, a fault that
the readiness check must catch). They travel as a ``DiagnosticRequest`` naming one of the
operations below with its arguments, so nothing but these functions ever runs where the
engine lives, and a name or an argument this module does not know is refused before
anything crosses to the engine.

Reads change nothing. Faults change the engine on purpose, to check what notices:
``perturb_weights`` adds noise to every weight (the server answers, with wrong tokens),
``restore_weights`` puts the weights it replaced back, ``stall`` holds the engine loop
for some seconds (a hung device, as readiness sees it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.engine.stats import EngineStats


@dataclass(frozen=True)
class RequestView:
    """What a diagnostic shows of one request the engine holds."""

    request_id: str
    tenant: str
    priority: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    finish_reason: str | None
    prefix_hit_tokens: int

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)


# -- reads ------------------------------------------------------------------------------


def newest_request(engine: LLMEngine, tenant: str | None = None) -> RequestView | None:
    """The newest request the engine holds (of ``tenant`` when given); None if there is none."""
    for request in reversed(engine.requests.values()):
        if tenant is None or request.tenant == tenant:
            return RequestView(
                request.request_id,
                request.tenant,
                int(request.priority),
                list(request.prompt_token_ids),
                list(request.output_token_ids),
                request.finish_reason,
                int(request.prefix_hit_tokens),
            )
    return None


def num_requests(engine: LLMEngine) -> int:
    """Requests the engine holds (finished ones it still keeps included)."""
    return len(engine.requests)


def requests_per_tenant(engine: LLMEngine) -> dict[str, int]:
    """Requests the engine holds, per tenant."""
    counts: dict[str, int] = {}
    for request in engine.requests.values():
        counts[request.tenant] = counts.get(request.tenant, 0) + 1
    return counts


def tenant_weights(engine: LLMEngine) -> dict[str, float]:
    """Each configured tenant's fair-share weight."""
    return {t.id: float(t.weight) for t in engine.config.scheduler.tenants}


def stats(engine: LLMEngine) -> EngineStats:
    """The engine's counters and page use (``LLMEngine.stats``)."""
    return engine.stats()


def has_unfinished(engine: LLMEngine) -> bool:
    return bool(engine.has_unfinished)


def step_numbers(engine: LLMEngine) -> list[int]:
    """The step numbers of the step records the engine keeps, oldest first."""
    return [int(record.step) for record in engine.step_records]


def num_step_rows(engine: LLMEngine) -> int:
    """Rows of the engine's steps frame (one per kept step record)."""
    return len(engine.steps_frame())


# -- faults -----------------------------------------------------------------------------

# The weights perturb_weights replaced, per runner (the engine's process holds its own).
_saved_weights: dict[int, list[Any]] = {}


def perturb_weights(engine: LLMEngine, scale: float, seed: int) -> None:
    """Gaussian noise of ``scale`` on every weight; ValueError if already perturbed."""
    runner = engine.runner
    if id(runner) in _saved_weights:
        raise ValueError("the weights are already perturbed (restore_weights first)")
    saved = runner.weights
    keys = jax.random.split(jax.random.key(seed), len(saved))
    runner.weights = [
        w + scale * jax.random.normal(k, w.shape, w.dtype) for w, k in zip(saved, keys, strict=True)
    ]
    _saved_weights[id(runner)] = saved


def restore_weights(engine: LLMEngine) -> None:
    """The weights perturb_weights replaced; ValueError if they were not perturbed."""
    saved = _saved_weights.pop(id(engine.runner), None)
    if saved is None:
        raise ValueError("the weights are not perturbed")
    engine.runner.weights = saved


def stall(engine: LLMEngine, seconds: float) -> None:
    """Hold the engine loop for ``seconds`` (at most MAX_STALL_S)."""
    time.sleep(seconds)


MAX_STALL_S = 30.0

# name -> (function, the types of its arguments after the engine, how many are optional)
OPERATIONS: dict[str, tuple[Callable[..., Any], tuple[type, ...], int]] = {
    "newest_request": (newest_request, (str,), 1),
    "num_requests": (num_requests, (), 0),
    "requests_per_tenant": (requests_per_tenant, (), 0),
    "tenant_weights": (tenant_weights, (), 0),
    "stats": (stats, (), 0),
    "has_unfinished": (has_unfinished, (), 0),
    "step_numbers": (step_numbers, (), 0),
    "num_step_rows": (num_step_rows, (), 0),
    "perturb_weights": (perturb_weights, (float, int), 0),
    "restore_weights": (restore_weights, (), 0),
    "stall": (stall, (float,), 0),
}


def check(name: Any, args: tuple[Any, ...]) -> None:
    """ValueError naming the problem unless ``name`` is a diagnostic and ``args`` fit it."""
    if not isinstance(name, str) or name not in OPERATIONS:
        raise ValueError(f"unknown diagnostic {name!r} (known: {', '.join(OPERATIONS)})")
    _, types, optional = OPERATIONS[name]
    if not len(types) - optional <= len(args) <= len(types):
        raise ValueError(f"diagnostic {name} takes {len(types)} argument(s), got {len(args)}")
    for arg, kind in zip(args, types, strict=False):
        number = kind is float and isinstance(arg, int | float)
        if isinstance(arg, bool) or not (isinstance(arg, kind) or number):
            raise ValueError(f"diagnostic {name}: {arg!r} is not a {kind.__name__}")
    if name == "stall" and not 0 <= args[0] <= MAX_STALL_S:
        raise ValueError(f"diagnostic stall: seconds must be in [0, {MAX_STALL_S}], got {args[0]}")
    if name == "perturb_weights" and not 0 < args[0] < 1e3:
        raise ValueError(f"diagnostic perturb_weights: scale must be in (0, 1000), got {args[0]}")


def run(engine: LLMEngine, name: str, args: tuple[Any, ...]) -> Any:
    """The diagnostic ``name`` on ``engine`` (checked first: ValueError)."""
    check(name, args)
    return OPERATIONS[name][0](engine, *args)
