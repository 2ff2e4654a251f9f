"""The serving benchmark behind `claimbench bench`: a workload of held-out prompts at
Poisson/gamma arrivals, served by an in-process engine or a running server over HTTP, summarized
as vLLM's benchmark does (TTFT, TPOT, ITL, E2EL, goodput; per tenant when several), and its
records saved as Parquet.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent
from claimbench.lab.metrics.serving_summary import (
    format_summary,
    format_tenant_table,
    summarize,
    summarize_by_tenant,
)
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.clients.replay import WorkItem, benchmark_items, replay
from claimbench.serving.clients.urls import check_http_url
from claimbench.workload.corpus import heldout_prompts

Slos = dict[str, float | None]  # slo_ttft_s, slo_tpot_s, slo_e2el_s in seconds; None = none


@dataclass(frozen=True)
class BenchWorkload:
    """How many prompts, how long, how fast they arrive, and how much each generates."""

    requests: int
    input_len: int  # mean prompt tokens
    output_len: int  # tokens each request generates (EOS ignored)
    range_ratio: float  # prompt lengths uniform in input_len * [1 - r, 1 + r]
    rate: float  # arrivals per second; inf = all at once
    burstiness: float  # gamma shape of the gaps: 1 = Poisson
    seed: int

    @property
    def prompt_lengths(self) -> tuple[int, int]:
        """The shortest and longest prompt (BOS included; 2 at least)."""
        low = max(2, int(self.input_len * (1 - self.range_ratio)))
        return low, int(self.input_len * (1 + self.range_ratio))

    @property
    def max_model_len(self) -> int:
        """Tokens the longest request holds: its prompt and its whole output."""
        return self.prompt_lengths[1] + self.output_len

    def check_positions(self, max_positions: int) -> None:
        """ValueError when the longest request does not fit the model's positions."""
        if self.max_model_len > max_positions:
            raise ValueError(
                f"prompts up to {self.prompt_lengths[1]} tokens (--input-len {self.input_len}, "
                f"--range-ratio {self.range_ratio}) + --output-len {self.output_len} exceed the "
                f"model's {max_positions} positions"
            )

    def items(self, tokenizer: Tokenizer) -> list[WorkItem]:
        """The requests: seeded held-out prompts at seeded arrival times. ValueError when the
        held-out text cannot give prompts this long."""
        low, high = self.prompt_lengths
        prompts = heldout_prompts(tokenizer, self.requests, low, high, self.seed)
        return benchmark_items(prompts, self.output_len, self.rate, self.burstiness, self.seed)


@dataclass(frozen=True)
class BenchTarget:
    """What the options ask to drive: the SLOs in seconds and, over HTTP, tenants' keys."""

    slos: Slos
    keys: dict[str, str]  # tenant -> API key; empty: no keys


def check_options(
    workload: BenchWorkload,
    kv_pool_mb: float,
    slo_ms: tuple[float | None, float | None, float | None],
    api_keys: Sequence[str],
    url: str | None,
) -> BenchTarget:
    """The options' checks, in the order `bench` reports them; ValueError (one line naming the
    option) for the first that fails. ``slo_ms`` is (TTFT, TPOT, E2EL) in ms."""
    w = workload
    if w.requests < 1 or w.input_len < 2 or w.output_len < 1 or not 0 <= w.range_ratio < 1:
        raise ValueError(
            f"need --requests >= 1, --input-len >= 2, --output-len >= 1, 0 <= --range-ratio < 1; "
            f"got {w.requests}, {w.input_len}, {w.output_len}, {w.range_ratio}"
        )
    if not w.rate > 0 or not w.burstiness > 0:
        raise ValueError(f"--rate and --burstiness must be > 0, got {w.rate}, {w.burstiness}")
    if not math.isfinite(kv_pool_mb) or not kv_pool_mb * 2**20 >= 1:
        raise ValueError(f"--kv-pool-mb must be a number > 0, got {kv_pool_mb}")
    if any(v is not None and not v > 0 for v in slo_ms):
        raise ValueError(f"--slo-* must be > 0 ms, got {', '.join(map(str, slo_ms))}")
    names = ("slo_ttft_s", "slo_tpot_s", "slo_e2el_s")
    slos = {k: None if v is None else v / 1000 for k, v in zip(names, slo_ms, strict=True)}
    if api_keys and url is None:
        raise ValueError("--api-key-file needs --url (the in-process engine has no keys)")
    keys = tenant_keys(api_keys)
    if url is not None:
        check_http_url(url, "--url")
    return BenchTarget(slos, keys)


def tenant_keys(given: Sequence[str]) -> dict[str, str]:
    """API keys (--api-key-file lines) as tenant -> key: TENANT=KEY as given, a bare KEY as
    tenant keyN. ValueError for an empty part or a tenant given twice."""
    keys: dict[str, str] = {}
    for i, value in enumerate(given, 1):
        tenant, sep, key = value.partition("=")
        tenant, key = (tenant, key) if sep else (f"key{i}", value)
        if not tenant or not key or tenant in keys:
            raise ValueError(
                f"--api-key-file: key {i} of {len(given)}: want KEY or TENANT=KEY, "
                "each tenant once (the key itself is not shown)"
            )
        keys[tenant] = key
    return keys


def bench_engine_config(
    model_path: Path, dtype: str, workload: BenchWorkload, kv_pool_mb: float, **engine: Any
) -> EngineConfig:
    """The engine's config: a pool of ``kv_pool_mb`` MiB, room for the longest request, and
    ``engine``'s settings (dtypes, batch limits, speculation, tp). ValueError on a bad one."""
    return EngineConfig.from_flat(
        model_path=model_path,
        dtype=dtype,
        kv_pool_bytes=int(kv_pool_mb * 2**20),
        max_model_len=workload.max_model_len,
        **engine,
    )


@dataclass(frozen=True)
class BenchResult:
    """The summary and the records it came from (steps only in process)."""

    summary: dict[str, float]
    requests: pd.DataFrame
    steps: pd.DataFrame | None
    by_tenant: pd.DataFrame  # one row per tenant

    def save(self, out_dir: Path) -> None:
        """The records as Parquet under ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        self.requests.to_parquet(out_dir / "requests.parquet")
        if self.steps is not None:
            self.steps.to_parquet(out_dir / "steps.parquet")

    def to_json(self, out_dir: Path) -> dict[str, Any]:
        """The summary (NaN as null), per tenant when several, and where the records are."""
        clean: dict[str, Any] = {k: None if math.isnan(v) else v for k, v in self.summary.items()}
        if len(self.by_tenant) > 1:
            clean["tenants"] = json.loads(self.by_tenant.to_json(orient="index"))
        return clean | {"records": str(out_dir)}

    def text(self) -> str:
        """The summary table, then the per-tenant one when there are several tenants."""
        parts = [format_summary(self.summary)]
        if len(self.by_tenant) > 1:
            parts.append(format_tenant_table(self.by_tenant))
        return "\n".join(parts)

    def where(self, out_dir: Path) -> str:
        """Where the records are (after the host's share of step time, in process)."""
        line = f"records in {out_dir}"
        if "host_share_pct" in self.summary:
            line = f"host share of step time {self.summary['host_share_pct']:.1f}% · {line}"
        return line


def bench_engine(
    engine: LLMEngine,
    items: list[WorkItem],
    timeout_s: float,
    slos: Slos,
    on_finished: Callable[[int], None] | None = None,
) -> BenchResult:
    """Serve ``items`` on ``engine`` at their arrival times; ``on_finished`` hears how many
    requests each step ended. Unfinished requests are aborted at ``timeout_s``."""

    def on_step(events: list[Event]) -> None:
        if on_finished is not None:
            on_finished(sum(isinstance(e, FinishEvent | RejectEvent) for e in events))

    result = replay(engine, items, timeout_s, on_step=on_step)
    requests, steps = engine.requests_frame(), engine.steps_frame()
    summary = summarize(requests, steps, **slos)
    summary["host_share_pct"] = float(
        100 * steps["host_s"].sum() / (steps["host_s"] + steps["device_s"]).sum()
    )
    summary["timed_out"] = float(result.timed_out)
    return BenchResult(summary, requests, steps, summarize_by_tenant(requests, **slos))


def bench_http(
    url: str,
    items: list[WorkItem],
    keys: dict[str, str],
    model: str | None,
    timeout_s: float,
    slos: Slos,
) -> BenchResult:
    """Send ``items`` to the server at ``url``, round-robin over ``keys``' tenants (one
    'default' tenant without keys). httpx errors for a server that cannot be reached."""
    from claimbench.serving.clients.http_replay import replay_http

    names = list(keys) or ["default"]
    items = [dataclasses.replace(w, tenant=names[i % len(names)]) for i, w in enumerate(items)]
    run = replay_http(url.rstrip("/"), items, keys=keys or None, model=model, timeout_s=timeout_s)
    summary = summarize(run.requests, **slos)
    summary["prefix_hit_rate"] = math.nan  # the server does not report cache hits
    summary["timed_out"] = float(run.timed_out)
    return BenchResult(summary, run.requests, None, summarize_by_tenant(run.requests, **slos))
