"""`claimbench bench`: a vLLM-style serving benchmark on held-out prompts.

In process (an engine built here) or, with --url, against a running ``claimbench serve``
over HTTP: the same workload either way, and the same summary (TTFT, TPOT, ITL, E2EL
percentiles, goodput against the --slo-* options, one line per tenant when there are
several). Prints the summary table (or one JSON object with --json) and saves the
per-request (and, in process, per-step) records as Parquet under ``<root>/bench/<time>/``
(git-ignored): not in results/, which holds only the claims' runs.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from claimbench.cli.admin.secret_options import API_KEY_ENV_VAR, read_secret_list
from claimbench.cli.common import err_console, fail, flag_message, global_options, option_flags
from claimbench.cli.extras import require_extra
from claimbench.cli.serving.engine_options import (
    DEFAULT_KV_DTYPE,
    DEFAULT_KV_SCALE,
    DEFAULT_WEIGHTS,
    ENGINE_DEFAULTS,
    KV_POOL_MB,
    BatchInvariantOption,
    KVDtype,
    KVPoolMBOption,
    MaxNumBatchedTokensOption,
    MaxNumSeqsOption,
    WeightFormat,
)
from claimbench.cli.serving.spec_options import (
    DraftModelOption,
    NumSpecTokensOption,
    Speculative,
    SpeculativeOption,
)
from claimbench.platform.cpu_devices import TPOption

if TYPE_CHECKING:
    from claimbench.bench.serving import BenchResult, BenchTarget, BenchWorkload
    from claimbench.engine.config import EngineConfig
    from claimbench.models.config import ModelConfig
    from claimbench.models.tokenizer import Tokenizer
    from claimbench.serving.clients.replay import WorkItem

BENCH_DIR = "bench"
# EngineConfig fields set by the option of the same name (kv_pool_bytes comes from --kv-pool-mb,
# checked here first, so its own message never reaches the user).
ENGINE_FLAGS = option_flags(
    ("kv_dtype", "kv_scale", "weights", "max_num_seqs", "max_num_batched_tokens")
    + ("num_spec_tokens", "speculative", "tp", "batch_invariant")
)


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
    max_num_seqs: MaxNumSeqsOption = ENGINE_DEFAULTS["max_num_seqs"],
    max_num_batched_tokens: MaxNumBatchedTokensOption = ENGINE_DEFAULTS["max_num_batched_tokens"],
    kv_pool_mb: KVPoolMBOption = KV_POOL_MB,
    kv_dtype: Annotated[KVDtype, typer.Option(help="KV cache dtype; auto = the model's.")] = (
        DEFAULT_KV_DTYPE
    ),
    kv_scale: Annotated[
        str, typer.Option(help="fp8 KV tensor scale: a number, or calibrate (held-out text).")
    ] = DEFAULT_KV_SCALE,
    weights: Annotated[
        WeightFormat, typer.Option(help="Weight-only quantization; bf16 = none.")
    ] = DEFAULT_WEIGHTS,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals.")] = 0,
    timeout_s: Annotated[float, typer.Option(help="Abort what is unfinished after this.")] = 3600,
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the Parquet records (default: <root>/bench/<time>)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    speculative: SpeculativeOption = Speculative.none,
    num_spec_tokens: NumSpecTokensOption = ENGINE_DEFAULTS["num_spec_tokens"],
    draft_model: DraftModelOption = None,
    url: Annotated[
        str | None,
        typer.Option(help="A running server (http://host:port) to drive instead of an engine."),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="With --url: a file of API keys, one KEY or TENANT=KEY a line; several spread "
            f"the requests round-robin over their tenants (else ${API_KEY_ENV_VAR}, "
            "separated by spaces or commas).",
        ),
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="With --url: the model to ask for (default: the served one).")
    ] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TTFT (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TPOT (ms).")] = None,
    slo_e2el_ms: Annotated[float | None, typer.Option(help="Goodput SLO on E2EL (ms).")] = None,
    tp: TPOption = ENGINE_DEFAULTS["tp"],
    batch_invariant: BatchInvariantOption = ENGINE_DEFAULTS["batch_invariant"],
) -> None:
    """Serve a Poisson/gamma workload of held-out prompts and summarize it.

    The engine options (KV pool, dtypes, batch limits, speculation) shape the in-process
    engine; with --url the server's own settings apply."""
    from claimbench.bench.serving import BenchWorkload, bench_engine_config, check_options
    from claimbench.engine.worker.sharding import check_model_tp

    if url is not None:
        require_extra("claimbench bench --url", "serve", ("httpx",))
    opts = global_options(ctx)
    workload = BenchWorkload(requests, input_len, output_len, range_ratio, rate, burstiness, seed)
    slo_ms = (slo_ttft_ms, slo_tpot_ms, slo_e2el_ms)
    try:
        # The environment's keys only matter against a server: in process there are none.
        api_keys = (
            read_secret_list(api_key_file, API_KEY_ENV_VAR, "--api-key-file")
            if api_key_file is not None or url is not None
            else []
        )
        target = check_options(workload, kv_pool_mb, slo_ms, api_keys, url)
    except ValueError as e:
        fail(str(e))
    path, model_cfg, tokenizer = _load_model(opts.model, workload)
    engine_options = dict(
        kv_dtype=kv_dtype.value,
        kv_scale=kv_scale,
        weights=weights.value,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        speculative=speculative.value,
        num_spec_tokens=num_spec_tokens,
        draft_model_path=draft_model,
        tp=tp,
        batch_invariant=batch_invariant,
    )
    if batch_invariant:  # no preemption, so no recompute to round differently (config.py)
        engine_options["kv_allocation"] = "reserve_request"
    try:
        config = bench_engine_config(path, opts.dtype, workload, kv_pool_mb, **engine_options)
        if url is None:  # a server is already placed: its own devices apply
            check_model_tp(tp, model_cfg)
    except ValueError as e:
        fail(flag_message(e, ENGINE_FLAGS))
    try:
        items = workload.items(tokenizer)
    except ValueError as e:
        fail(str(e).splitlines()[0])
    out_dir = out or opts.root / BENCH_DIR / time.strftime("%Y%m%d-%H%M%S")
    if url is not None:
        result = _over_http(url, items, target, served_model_name, timeout_s)
    else:
        result = _in_process(config, tokenizer, items, target, timeout_s)
    _report(result, out_dir, json_out)


def _load_model(model: Path | None, workload: BenchWorkload) -> tuple[Path, ModelConfig, Tokenizer]:
    """The model's directory, config and tokenizer; one line when it cannot serve the workload."""
    from claimbench.models.checkpoint import default_model_path, read_config
    from claimbench.models.tokenizer import Tokenizer

    try:
        path = model or default_model_path()
        model_cfg = read_config(path)
        tokenizer = Tokenizer.from_dir(path)
    except (ValueError, FileNotFoundError) as e:
        fail(f"--model: {str(e).splitlines()[0]}")
    try:
        workload.check_positions(model_cfg.max_position_embeddings)
    except ValueError as e:
        fail(str(e))
    return path, model_cfg, tokenizer


def _in_process(
    config: EngineConfig,
    tokenizer: Tokenizer,
    items: list[WorkItem],
    target: BenchTarget,
    timeout_s: float,
) -> BenchResult:
    """The benchmark on an engine built here, compiled first, with a progress bar."""
    from rich.progress import Progress

    from claimbench.bench.serving import bench_engine
    from claimbench.engine.build import build_engine

    try:
        engine = build_engine(config, tokenizer=tokenizer)
    except ValueError as e:  # a draft model that cannot serve this target
        fail(f"--draft-model: {str(e).splitlines()[0]}")
    num_compiled, compile_s = engine.precompile()
    err_console.print(f"compiled {num_compiled} step shapes in {compile_s:.1f} s", style="dim")
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("serving", total=len(items))
        on_finished = functools.partial(progress.advance, task)
        return bench_engine(engine, items, timeout_s, target.slos, on_finished)


def _over_http(
    url: str, items: list[WorkItem], target: BenchTarget, model: str | None, timeout_s: float
) -> BenchResult:
    """The benchmark against a running server; an unreachable one is one line."""
    import httpx

    from claimbench.bench.serving import bench_http

    try:
        return bench_http(url, items, target.keys, model, timeout_s, target.slos)
    except httpx.HTTPError as e:
        fail(f"--url {url}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def _report(result: BenchResult, out_dir: Path, json_out: bool) -> None:
    """Save the records under ``out_dir`` and print the summary (per tenant when several)."""
    result.save(out_dir)
    if json_out:
        sys.stdout.write(json.dumps(result.to_json(out_dir)) + "\n")
        err_console.print(f"records in {out_dir}", style="dim", highlight=False, soft_wrap=True)
        return
    print(result.text())
    err_console.print(result.where(out_dir), style="dim", highlight=False, soft_wrap=True)
