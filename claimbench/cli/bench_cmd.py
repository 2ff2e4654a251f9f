"""`claimbench bench`: a vLLM-style serving benchmark on held-out prompts.

In process (an engine built here) or, with --url, against a running ``claimbench serve``
over HTTP: the same workload either way, and the same summary (TTFT, TPOT, ITL, E2EL
percentiles, goodput against the --slo-* options, one line per tenant when there are
several). Prints the summary table (or one JSON object with --json) and saves the
per-request (and, in process, per-step) records as Parquet under ``<root>/bench/<time>/``
(git-ignored): not in results/, which holds only the claims' runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import err_console, fail, flag_message, global_options, option_flags
from claimbench.cli.spec_options import (
    DraftModelOption,
    NumSpecTokensOption,
    Speculative,
    SpeculativeOption,
)
from claimbench.platform.cpu_devices import TPOption

BENCH_DIR = "bench"
# EngineConfig fields set by the option of the same name (kv_pool_bytes comes from --kv-pool-mb,
# checked here first, so its own message never reaches the user).
ENGINE_FLAGS = option_flags(
    ("kv_dtype", "kv_scale", "weights", "max_num_seqs", "max_num_batched_tokens")
    + ("num_spec_tokens", "speculative", "tp")
)


class KVDtype(StrEnum):
    """KV cache storage (engine.config.KV_DTYPES); auto = the model dtype."""

    auto = "auto"
    bf16 = "bf16"
    f32 = "f32"
    int8 = "int8"
    fp8 = "fp8"


class WeightFormat(StrEnum):
    """Weight-only quantization (engine.config.WEIGHT_FORMATS); bf16 = none."""

    bf16 = "bf16"
    int8 = "int8"
    fp8 = "fp8"


def bench(
    ctx: typer.Context,
    requests: Annotated[int, typer.Option(help="Number of requests.")] = 64,
    rate: Annotated[float, typer.Option(help="Arrivals per second; inf = all at once.")] = (
        math.inf
    ),
    burstiness: Annotated[
        float, typer.Option(help="Gamma shape of the gaps: 1 = Poisson, < 1 burstier.")
    ] = 1.0,
    input_len: Annotated[int, typer.Option(help="Mean prompt tokens.")] = 256,
    output_len: Annotated[int, typer.Option(help="Output tokens per request (EOS ignored).")] = 128,
    range_ratio: Annotated[
        float, typer.Option(help="Prompt lengths uniform in input_len * [1 - r, 1 + r].")
    ] = 0.0,
    max_num_seqs: Annotated[int, typer.Option(help="Sequences in flight at most.")] = 32,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 512,
    kv_pool_mb: Annotated[float, typer.Option(help="KV cache pool in MiB.")] = 256.0,
    kv_dtype: Annotated[
        KVDtype, typer.Option(help="KV cache dtype; auto = the model's.")
    ] = KVDtype.auto,
    kv_scale: Annotated[
        str, typer.Option(help="fp8 KV tensor scale: a number, or calibrate (held-out text).")
    ] = "1.0",
    weights: Annotated[
        WeightFormat, typer.Option(help="Weight-only quantization; bf16 = none.")
    ] = WeightFormat.bf16,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals.")] = 0,
    timeout_s: Annotated[float, typer.Option(help="Abort what is unfinished after this.")] = 3600,
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the Parquet records (default: <root>/bench/<time>)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    speculative: SpeculativeOption = Speculative.none,
    num_spec_tokens: NumSpecTokensOption = 4,
    draft_model: DraftModelOption = None,
    url: Annotated[
        str | None,
        typer.Option(help="A running server (http://host:port) to drive instead of an engine."),
    ] = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<key>",
            help="With --url: an API key, or TENANT=KEY; repeat it to spread the requests "
            "round-robin over several tenants.",
        ),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="With --url: the model to ask for (default: the served one).")
    ] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TTFT (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TPOT (ms).")] = None,
    slo_e2el_ms: Annotated[float | None, typer.Option(help="Goodput SLO on E2EL (ms).")] = None,
    tp: TPOption = 1,
) -> None:
    """Serve a Poisson/gamma workload of held-out prompts and summarize it.

    The engine options (KV pool, dtypes, batch limits, speculation) shape the in-process
    engine; with --url the server's own settings apply."""
    from rich.progress import Progress

    from claimbench.engine.build import build_engine
    from claimbench.engine.config import EngineConfig
    from claimbench.engine.outputs import FinishEvent, RejectEvent
    from claimbench.engine.worker.sharding import check_model_tp
    from claimbench.lab.serving_summary import summarize
    from claimbench.models.checkpoint import default_model_path, read_config
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.serving.replay import benchmark_items, replay
    from claimbench.workload.corpus import heldout_prompts

    opts = global_options(ctx)
    if requests < 1 or input_len < 2 or output_len < 1 or not 0 <= range_ratio < 1:
        fail(
            f"need --requests >= 1, --input-len >= 2, --output-len >= 1, 0 <= --range-ratio < 1; "
            f"got {requests}, {input_len}, {output_len}, {range_ratio}"
        )
    if not rate > 0 or not burstiness > 0:
        fail(f"--rate and --burstiness must be > 0, got {rate}, {burstiness}")
    if not kv_pool_mb * 2**20 >= 1:
        fail(f"--kv-pool-mb must be > 0, got {kv_pool_mb}")
    slos = {"slo_ttft_s": slo_ttft_ms, "slo_tpot_s": slo_tpot_ms, "slo_e2el_s": slo_e2el_ms}
    if any(v is not None and not v > 0 for v in slos.values()):
        fail(f"--slo-* must be > 0 ms, got {slo_ttft_ms}, {slo_tpot_ms}, {slo_e2el_ms}")
    slos = {k: None if v is None else v / 1000 for k, v in slos.items()}
    if api_key and url is None:
        fail("--api-key needs --url (the in-process engine has no keys)")
    keys = tenant_keys(api_key or [])
    if url is not None and not url.startswith(("http://", "https://")):
        fail(f"--url must start with http:// or https://, got {url!r}")
    min_len = max(2, int(input_len * (1 - range_ratio)))
    max_len = int(input_len * (1 + range_ratio))
    try:
        path = opts.model or default_model_path()
        model_cfg = read_config(path)
        tokenizer = Tokenizer.from_dir(path)
    except (ValueError, FileNotFoundError) as e:
        fail(f"--model: {str(e).splitlines()[0]}")
    if max_len + output_len > model_cfg.max_position_embeddings:
        fail(
            f"prompts up to {max_len} tokens (--input-len {input_len}, --range-ratio "
            f"{range_ratio}) + --output-len {output_len} exceed the model's "
            f"{model_cfg.max_position_embeddings} positions"
        )
    try:
        config = EngineConfig(
            model_path=path,
            dtype=opts.dtype,
            kv_dtype=kv_dtype.value,
            kv_scale=kv_scale,
            weights=weights.value,
            kv_pool_bytes=int(kv_pool_mb * 2**20),
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_len + output_len,
            speculative=speculative.value,
            num_spec_tokens=num_spec_tokens,
            draft_model_path=draft_model,
            tp=tp,
        )
        if url is None:  # a server is already placed: its own devices apply
            check_model_tp(tp, model_cfg)
    except ValueError as e:
        fail(flag_message(e, ENGINE_FLAGS))
    try:
        prompts = heldout_prompts(tokenizer, requests, min_len, max_len, seed)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    items = benchmark_items(prompts, output_len, rate, burstiness, seed)
    out_dir = out or opts.root / BENCH_DIR / time.strftime("%Y%m%d-%H%M%S")
    if url is not None:
        import httpx

        from claimbench.serving.http_replay import replay_http

        names = list(keys) or ["default"]
        items = [dataclasses.replace(w, tenant=names[i % len(names)]) for i, w in enumerate(items)]
        try:
            run = replay_http(
                url.rstrip("/"),
                items,
                keys=keys or None,
                model=served_model_name,
                timeout_s=timeout_s,
            )
        except httpx.HTTPError as e:
            fail(f"--url {url}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        summary = summarize(run.requests, **slos)
        summary["prefix_hit_rate"] = math.nan  # the server does not report cache hits
        summary["timed_out"] = float(run.timed_out)
        report(summary, run.requests, None, out_dir, json_out, slos)
        return
    try:
        engine = build_engine(config, tokenizer=tokenizer)
    except ValueError as e:  # a draft model that cannot serve this target
        fail(f"--draft-model: {str(e).splitlines()[0]}")
    num_compiled, compile_s = engine.precompile()
    err_console.print(f"compiled {num_compiled} step shapes in {compile_s:.1f} s", style="dim")
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("serving", total=requests)

        def on_step(events) -> None:
            done = sum(isinstance(e, FinishEvent | RejectEvent) for e in events)
            progress.advance(task, done)

        result = replay(engine, items, timeout_s, on_step=on_step)
    requests_df, steps_df = engine.requests_frame(), engine.steps_frame()
    summary = summarize(requests_df, steps_df, **slos)
    summary["host_share_pct"] = float(
        100 * steps_df["host_s"].sum() / (steps_df["host_s"] + steps_df["device_s"]).sum()
    )
    summary["timed_out"] = float(result.timed_out)
    report(summary, requests_df, steps_df, out_dir, json_out, slos)


def tenant_keys(given: list[str]) -> dict[str, str]:
    """--api-key values as tenant -> key: TENANT=KEY as given, a bare KEY as tenant keyN."""
    keys: dict[str, str] = {}
    for i, value in enumerate(given, 1):
        tenant, sep, key = value.partition("=")
        tenant, key = (tenant, key) if sep else (f"key{i}", value)
        if not tenant or not key or tenant in keys:
            fail(f"--api-key {value!r}: want KEY or TENANT=KEY, each tenant once")
        keys[tenant] = key
    return keys


def report(
    summary: dict[str, float],
    requests_df,
    steps_df,
    out_dir: Path,
    json_out: bool,
    slos: dict[str, float | None],
) -> None:
    """Save the records under ``out_dir`` and print the summary (per tenant when several)."""
    from claimbench.lab.serving_summary import (
        format_summary,
        format_tenant_table,
        summarize_by_tenant,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    requests_df.to_parquet(out_dir / "requests.parquet")
    if steps_df is not None:
        steps_df.to_parquet(out_dir / "steps.parquet")
    by_tenant = summarize_by_tenant(requests_df, **slos)
    if json_out:
        clean = {k: None if math.isnan(v) else v for k, v in summary.items()}
        if len(by_tenant) > 1:
            tenants = json.loads(by_tenant.to_json(orient="index"))
            clean["tenants"] = tenants
        sys.stdout.write(json.dumps(clean | {"records": str(out_dir)}) + "\n")
        err_console.print(f"records in {out_dir}", style="dim", highlight=False, soft_wrap=True)
        return
    print(format_summary(summary))
    if len(by_tenant) > 1:
        print(format_tenant_table(by_tenant))
    where = f"records in {out_dir}"
    if "host_share_pct" in summary:
        where = f"host share of step time {summary['host_share_pct']:.1f}% · {where}"
    err_console.print(where, style="dim", highlight=False, soft_wrap=True)
