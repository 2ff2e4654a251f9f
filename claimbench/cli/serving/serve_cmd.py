"""`claimbench serve`: the engine behind an OpenAI-compatible HTTP API, API keys as tenants."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.admin.secret_options import (
    METRICS_KEY_ENV_VAR,
    MetricsKeyFileOption,
    read_secret,
)
from claimbench.cli.common import err_console, fail, global_options
from claimbench.cli.extras import require_extra
from claimbench.cli.serving.engine_options import (
    ENGINE_DEFAULTS,
    KV_POOL_MB,
    BatchInvariantOption,
    KVPoolMBOption,
    MaxModelLenOption,
    MaxNumBatchedTokensOption,
    MaxNumSeqsOption,
    SchedulingPolicyOption,
)
from claimbench.engine.config import KV_DTYPES
from claimbench.serving.api.state import PrefixSharing


def serve(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="TCP port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    tenants: Annotated[
        Path | None,
        typer.Option(help="tenants.yaml (API key hashes -> tenants); none = single-tenant."),
    ] = None,
    ladder: Annotated[
        Path | None,
        typer.Option(help="ladder.yaml: degradation-ladder rungs taken under load; none = off."),
    ] = None,
    prefix_sharing: Annotated[
        PrefixSharing, typer.Option(help="Who shares prefix-cache blocks.")
    ] = PrefixSharing.per_tenant,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model id clients send (default: the model directory's).")
    ] = None,
    max_model_len: MaxModelLenOption = ENGINE_DEFAULTS["max_model_len"],
    max_num_seqs: MaxNumSeqsOption = ENGINE_DEFAULTS["max_num_seqs"],
    max_num_batched_tokens: MaxNumBatchedTokensOption = ENGINE_DEFAULTS["max_num_batched_tokens"],
    kv_pool_mb: KVPoolMBOption = KV_POOL_MB,
    kv_dtype: Annotated[str, typer.Option(help=" | ".join(KV_DTYPES) + ".")] = ENGINE_DEFAULTS[
        "kv_dtype"
    ],
    weights: Annotated[str, typer.Option(help="Weights: bf16 (none) | int8 | fp8.")] = (
        ENGINE_DEFAULTS["weights"]
    ),
    batch_invariant: BatchInvariantOption = ENGINE_DEFAULTS["batch_invariant"],
    scheduling_policy: SchedulingPolicyOption = ENGINE_DEFAULTS["scheduling_policy"],
    victim_policy: Annotated[str, typer.Option(help="Preemption victim policy.")] = (
        ENGINE_DEFAULTS["victim_policy"]
    ),
    precompile: Annotated[
        bool, typer.Option(help="Compile every step shape before serving.")
    ] = True,
    shutdown_timeout_s: Annotated[
        float, typer.Option(help="On SIGTERM, wait this long for in-flight requests.")
    ] = 30.0,
    async_scheduling: Annotated[
        bool | None,
        typer.Option(
            help="Build step N+1 while step N runs; the engine process then waits, while a "
            "step runs, for the requests clients send as theirs finish (default: the "
            "platform's, off today)."
        ),
    ] = ENGINE_DEFAULTS["async_scheduling"],
    stream_interval: Annotated[
        int,
        typer.Option(
            help="Stream a request's tokens every N tokens (its first at once): fewer "
            "chunks per token, a coarser stream."
        ),
    ] = 1,
    api_batch_policy: Annotated[
        bool,
        typer.Option(
            help="Run the API process under Linux's SCHED_BATCH once the engine process "
            "has started: its wake-ups (a step's tokens, a client's request) then never "
            "preempt the engine's threads on a shared core, as on a CPU host."
        ),
    ] = True,
    max_request_bytes: Annotated[
        int, typer.Option(help="Longest request body; a longer one gets 413 unread.")
    ] = 4 * 2**20,
    max_header_bytes: Annotated[
        int, typer.Option(help="Longest request headers; longer ones get 431.")
    ] = 64 * 2**10,
    header_timeout_s: Annotated[
        float,
        typer.Option(help="A request's headers not complete this long get 408 (slowloris)."),
    ] = 10.0,
    max_connections_per_client: Annotated[
        int,
        typer.Option(help="Open connections one client address may hold; more get 429."),
    ] = 512,
    metrics_key_file: MetricsKeyFileOption = None,
    compile_cache: Annotated[
        bool,
        typer.Option(
            help="Load and store compiled step programs in the persistent compilation cache "
            "that warm_cache fills (CLAIMBENCH_COMPILE_CACHE moves it): a start or an engine "
            "restart then loads them instead of compiling."
        ),
    ] = True,
    max_engine_restarts: Annotated[
        int,
        typer.Option(
            help="Tries to restart an engine process that died before the server exits 1."
        ),
    ] = 3,
) -> None:
    """Serve the model over HTTP (OpenAI's /v1/completions and /v1/chat/completions)."""
    require_extra("claimbench serve", "serve")
    from claimbench.models.checkpoint import ModelLoadError, default_model_path
    from claimbench.serving.engine_loop.process_engine import EngineProcessError
    from claimbench.serving.serve_setup import (
        check_listen,
        check_serve_limits,
        serve_engine_config,
        serve_until_stopped,
    )
    from claimbench.serving.server import ServeOptions, build_server_state

    opts = global_options(ctx)
    limits = dict(
        stream_interval=stream_interval,
        max_request_bytes=max_request_bytes,
        max_header_bytes=max_header_bytes,
        header_timeout_s=header_timeout_s,
        max_connections_per_client=max_connections_per_client,
        max_engine_restarts=max_engine_restarts,
    )
    engine = dict(dtype=opts.dtype, kv_dtype=kv_dtype, weights=weights, max_model_len=max_model_len)
    engine |= dict(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens)
    engine |= dict(scheduling_policy=scheduling_policy, victim_policy=victim_policy)
    engine |= dict(batch_invariant=batch_invariant)
    if batch_invariant:  # no preemption, so no recompute to round differently (config.py)
        engine |= dict(kv_allocation="reserve_request")
    if compile_cache:
        from claimbench.harness.context import COMPILE_CACHE_DIR

        engine |= dict(compilation_cache_dir=COMPILE_CACHE_DIR)
    try:
        check_serve_limits(
            port=port,
            shutdown_timeout_s=shutdown_timeout_s,
            kv_pool_mb=kv_pool_mb,
            model_name=served_model_name,
            **limits,
        )
        check_listen(host, port)
        options = ServeOptions(
            model_dir=opts.model or default_model_path(),
            engine=serve_engine_config(
                kv_pool_mb=kv_pool_mb,
                ladder_file=ladder,
                async_scheduling=async_scheduling,
                **engine,
            ),
            tenants_file=tenants,
            prefix_sharing=prefix_sharing,
            model_name=served_model_name,
            host=host,
            port=port,
            shutdown_timeout_s=shutdown_timeout_s,
            precompile=precompile,
            api_batch_policy=api_batch_policy,
            metrics_key=read_secret(metrics_key_file, METRICS_KEY_ENV_VAR, "--metrics-key-file"),
            **limits,
        )
        state, lines = build_server_state(options)
    except (ValueError, FileNotFoundError, ModelLoadError, EngineProcessError) as e:
        fail(str(e).splitlines()[0])
    for line in lines:
        err_console.print(line, style="dim", highlight=False)
    err_console.print(f"serving {state.model_name!r} on http://{host}:{port}/v1", highlight=False)
    failure = serve_until_stopped(state, options)
    if failure is not None:  # a supervisor above must see the crash, not a clean exit
        fail(failure, code=1)
