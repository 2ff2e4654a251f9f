"""Serving metrics over an engine's request and step frames, with vLLM's definitions.

TTFT = first token - arrival; E2EL = finish - arrival; TPOT = (E2EL - TTFT) / (output - 1);
ITL = every gap between consecutive tokens of a request, pooled over requests.
Throughputs divide by the run's duration (first arrival to last finish). Goodput counts
requests per second that meet every SLO given.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)


def _itl(requests: pd.DataFrame) -> np.ndarray:
    gaps = [np.diff(t) for t in requests["token_times_s"] if len(t) > 1]
    return np.concatenate(gaps) if gaps else np.array([])


def _distribution(name: str, values: np.ndarray) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return {f"mean_{name}": np.nan} | {f"p{p}_{name}": np.nan for p in PERCENTILES}
    out = {f"mean_{name}": float(np.mean(values))}
    for p in PERCENTILES:
        out[f"p{p}_{name}"] = float(np.percentile(values, p))
    return out


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame | None = None,
    *,
    duration_s: float | None = None,
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
    slo_e2el_s: float | None = None,
) -> dict[str, float]:
    """Serving metrics over a requests frame (and KV headroom from a steps frame).

    ``duration_s`` overrides the span the throughputs divide by (default: first arrival
    to last finish of these requests).
    """
    done = requests[requests["completed"]]
    duration = duration_s if duration_s is not None else _span(requests)
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: np.nan)
    out: dict[str, float] = {
        "num_requests": float(len(requests)),
        "num_completed": float(len(done)),
        "num_rejected": float(requests["rejected_reason"].notna().sum()),
        "duration_s": duration,
        "total_input_tokens": float(done["prompt_tokens"].sum()),
        "total_output_tokens": float(done["output_tokens"].sum()),
        "request_throughput": per_s(len(done)),
        "output_throughput": per_s(float(done["output_tokens"].sum())),
        "total_token_throughput": per_s(
            float((done["prompt_tokens"] + done["output_tokens"]).sum())
        ),
        # Share of prompt tokens whose KV came from the prefix cache at admission.
        "prefix_hit_rate": float(done["prefix_hit_tokens"].sum() / done["prompt_tokens"].sum())
        if len(done)
        else np.nan,
    }
    good = np.ones(len(done), bool)
    for column, slo in (("ttft_s", slo_ttft_s), ("tpot_s", slo_tpot_s), ("e2el_s", slo_e2el_s)):
        if slo is not None:
            # A single-token request has no TPOT; it cannot miss a TPOT SLO.
            good &= ~(done[column].to_numpy() > slo)
    if any(s is not None for s in (slo_ttft_s, slo_tpot_s, slo_e2el_s)):
        out["goodput"] = per_s(float(good.sum()))
    for name in ("ttft_s", "tpot_s", "e2el_s"):
        out |= _distribution(name, done[name].to_numpy(dtype=float))
    out |= _distribution("itl_s", _itl(done))
    if steps is not None and len(steps):
        usable = steps["pages_used"] + steps["pages_free"]
        out["min_kv_headroom"] = float((steps["pages_free"] / usable).min())
        out["total_preemptions"] = float(requests["num_preemptions"].sum())
        out |= spec_decode_summary(steps)
    return out


def spec_decode_summary(steps: pd.DataFrame) -> dict[str, float]:
    """vLLM's speculative-decoding metrics over a steps frame ({} without drafts): drafts,
    draft tokens, accepted tokens, mean acceptance length (1 + accepted / drafts: tokens
    emitted per verify step), draft acceptance rate (accepted / draft tokens) and, per draft
    position j, the share of drafts whose token j was accepted."""
    if "num_drafts" not in steps or not steps["num_drafts"].sum():
        return {}
    num_drafts = float(steps["num_drafts"].sum())
    num_draft_tokens = float(steps["num_draft_tokens"].sum())
    num_accepted = float(steps["num_accepted_tokens"].sum())
    out = {
        "num_drafts": num_drafts,
        "num_draft_tokens": num_draft_tokens,
        "num_accepted_tokens": num_accepted,
        "mean_acceptance_length": 1 + num_accepted / num_drafts,
        "draft_acceptance_rate": num_accepted / num_draft_tokens,
        # Proposing's share of the whole step (host, device and the draft's own steps).
        "draft_share_pct": float(
            100
            * steps["draft_s"].sum()
            / (steps["host_s"] + steps["device_s"] + steps["draft_s"]).sum()
        ),
    }
    per_pos = np.sum(np.stack(steps["accepted_per_pos"].to_numpy()), axis=0)
    for j, count in enumerate(per_pos):
        out[f"acceptance_rate_pos_{j}"] = float(count) / num_drafts
    return out


def summarize_by_tenant(requests: pd.DataFrame, **slos: float | None) -> pd.DataFrame:
    """``summarize`` per tenant, one row each; throughputs over the whole run's span, so
    the tenants' throughputs add up to the run's."""
    duration = _span(requests)
    rows = {
        tenant: summarize(group, duration_s=duration, **slos)
        for tenant, group in requests.groupby("tenant", sort=True)
    }
    return pd.DataFrame.from_dict(rows, orient="index")


def _span(requests: pd.DataFrame) -> float:
    done = requests[requests["completed"]]
    return float(done["finish_s"].max() - requests["arrival_s"].min()) if len(done) else 0.0


def format_summary(s: dict[str, float], title: str = "Serving Benchmark Result") -> str:
    """The summary as vLLM's benchmark_serving prints it (times in ms)."""
    width = 50

    def rule(name: str, fill: str = "-") -> str:
        return f"{name:{fill}^{width}}"

    def row(label: str, value: float, digits: int = 2) -> str:
        return f"{label:<40}{value:<10.{digits}f}"

    lines = [
        rule(f" {title} ", "="),
        row("Successful requests:", s["num_completed"], 0),
        row("Rejected requests:", s["num_rejected"], 0),
        row("Benchmark duration (s):", s["duration_s"]),
        row("Total input tokens:", s["total_input_tokens"], 0),
        row("Total generated tokens:", s["total_output_tokens"], 0),
        row("Request throughput (req/s):", s["request_throughput"]),
        row("Output token throughput (tok/s):", s["output_throughput"]),
        row("Total Token throughput (tok/s):", s["total_token_throughput"]),
    ]
    if "goodput" in s:
        lines.append(row("Request goodput (req/s):", s["goodput"]))
    sections = (
        ("Time to First Token", "ttft_s", "TTFT"),
        ("Time per Output Token (excl. 1st token)", "tpot_s", "TPOT"),
        ("Inter-token Latency", "itl_s", "ITL"),
        ("End-to-end Latency", "e2el_s", "E2EL"),
    )
    for heading, key, short in sections:
        lines.append(rule(heading))
        lines.append(row(f"Mean {short} (ms):", 1000 * s[f"mean_{key}"]))
        for p in PERCENTILES:
            label = "Median" if p == 50 else f"P{p}"
            lines.append(row(f"{label} {short} (ms):", 1000 * s[f"p{p}_{key}"]))
    if "min_kv_headroom" in s:
        lines.append(rule("KV cache"))
        lines.append(row("Min KV headroom (% pages free):", 100 * s["min_kv_headroom"]))
        lines.append(row("Preemptions:", s["total_preemptions"], 0))
    if "num_drafts" in s:
        lines.append(rule("Speculative Decoding"))
        lines.append(row("Acceptance rate (%):", 100 * s["draft_acceptance_rate"]))
        lines.append(row("Acceptance length:", s["mean_acceptance_length"]))
        lines.append(row("Drafts:", s["num_drafts"], 0))
        lines.append(row("Draft tokens:", s["num_draft_tokens"], 0))
        lines.append(row("Accepted tokens:", s["num_accepted_tokens"], 0))
        lines.append(row("Draft share of step time (%):", s["draft_share_pct"]))
        j = 0
        while f"acceptance_rate_pos_{j}" in s:
            lines.append(row(f"Position {j} acceptance (%):", 100 * s[f"acceptance_rate_pos_{j}"]))
            j += 1
    lines.append("=" * width)
    return "\n".join(lines)


def format_tenant_table(by_tenant: pd.DataFrame) -> str:
    """``summarize_by_tenant``'s frame as a table: one line per tenant, times in ms."""
    columns = [
        ("done", "num_completed", 1, 0),
        ("rejected", "num_rejected", 1, 0),
        ("out tok/s", "output_throughput", 1, 1),
        ("TTFT p50", "p50_ttft_s", 1000, 1),
        ("TTFT p99", "p99_ttft_s", 1000, 1),
        ("TPOT p50", "p50_tpot_s", 1000, 1),
        ("TPOT p99", "p99_tpot_s", 1000, 1),
        ("E2EL p99", "p99_e2el_s", 1000, 1),
    ]
    if "goodput" in by_tenant:
        columns.append(("goodput", "goodput", 1, 2))
    lines = [f"{'tenant':<12}" + "".join(f"{label:>11}" for label, *_ in columns)]
    for tenant, row in by_tenant.iterrows():
        cells = "".join(f"{scale * row[key]:>11.{digits}f}" for _, key, scale, digits in columns)
        lines.append(f"{str(tenant):<12}{cells}")
    return "\n".join(lines)
