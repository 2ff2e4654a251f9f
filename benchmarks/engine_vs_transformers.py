"""Our engine against Hugging Face transformers on the same checkpoint and workload.

    python benchmarks/engine_vs_transformers.py [--requests 64] [--output-len 128] [--json]

The same requests (held-out prompts of --min-input..--max-input tokens, --output-len greedy
tokens each, EOS ignored) go through our engine and through transformers: static batched
``generate`` (left-padded batches of --hf-batch-size) and, when the installed version has
it, the continuous-batching ``generate_batch``. Output tokens/s of each and the ratio
(targets: ours >= 2x the best transformers mode). Then, at --decode-batch concurrent
requests, the same decode workload with async scheduling off and on (alternating,
--decode-trials each): decode throughput of each and the gain, the host share of the decode
step (target <= 10% with async scheduling on), and our decode step over a dense-cache jitted
decode of the same model at the same batch (paging overhead, <= 1.25x). --decode-only skips
the transformers comparison.

Host share: off, host seconds over host + device seconds of the full-batch decode steps (the
host runs while the device waits). On, the host's work hides behind the device's, so what
counts is the part it does not hide: the share of the decode step period (one step's wall
time, from successive step starts) not covered by the device step, whose length is taken
from the synchronous run of the same workload (overlapped, the device's own span cannot be
observed from the host without waiting for it).
Compilation and warm-up are excluded from every timing. The engine runs with a
2048-token step budget (prefill in few, large steps) and, on CPU, the native attention
kernels; --attention-backend xla measures the pure-XLA path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.kv.kv_cache import kv_bytes_per_token, resolve_kv_dtype
from claimbench.engine.sampling_params import SamplingParams
from claimbench.kernels.backend import resolve_backend_name
from claimbench.kernels.kv_quant import LayerKV, interleave_kv, split_kv
from claimbench.kernels.metadata import AttentionMetadata
from claimbench.kernels.reference import MASK_VALUE
from claimbench.models.checkpoint import default_model_path, load_model
from claimbench.models.tokenizer import Tokenizer
from claimbench.platform.jax_platforms import set_default_jax_platforms
from claimbench.workload.corpus import heldout_prompts


def engine_for(args, model, tokenizer, max_num_seqs: int) -> LLMEngine:
    max_len = args.max_input + args.output_len
    per_token = kv_bytes_per_token(model.cfg, resolve_kv_dtype("auto", model.dtype))
    # Room for every sequence at full length: throughput without preemption.
    pool = (max_num_seqs * (max_len // 16 + 1) + 1) * 16 * per_token
    config = EngineConfig(
        dtype=args.dtype,
        kv_pool_bytes=pool,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=max_len,
        prefix_caching="off",
        attention_backend=args.attention_backend,
    )
    engine = build_engine(config, model=model, tokenizer=tokenizer)
    engine.precompile()
    return engine


def run_engine(args, model, tokenizer, prompts) -> float:
    engine = engine_for(args, model, tokenizer, args.max_num_seqs)
    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    engine.generate(prompts[:2], SamplingParams(max_tokens=2))  # warm host paths
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return sum(len(o.token_ids) for o in outs) / elapsed


def run_hf_static(args, hf, prompts, pad_id: int) -> float:
    import torch

    def batches():
        for i in range(0, len(prompts), args.hf_batch_size):
            chunk = prompts[i : i + args.hf_batch_size]
            width = max(len(p) for p in chunk)
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            yield ids, mask

    def generate(ids, mask, n):
        kw = dict(do_sample=False, pad_token_id=pad_id, eos_token_id=None)
        return hf.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, **kw)

    with torch.inference_mode():
        ids, mask = next(batches())
        generate(ids[:2], mask[:2], 2)  # warm-up
        start = time.perf_counter()
        total = sum(generate(i, m, args.output_len).shape[1] - i.shape[1] for i, m in batches())
        elapsed = time.perf_counter() - start
    return len(prompts) * args.output_len / elapsed if total else 0.0


def run_hf_continuous(args, hf, prompts) -> float:
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=args.output_len, do_sample=False, eos_token_id=-1, pad_token_id=0
    )
    with torch.inference_mode():
        hf.generate_batch(inputs=prompts[:2], generation_config=config)  # warm-up
        start = time.perf_counter()
        outs = hf.generate_batch(inputs=prompts, generation_config=config)
        elapsed = time.perf_counter() - start
    return sum(len(o.generated_tokens) for o in outs.values()) / elapsed


def dense_decode_attention(q, k, v, cache, md, *, sm_scale, sliding_window=None, soft_cap=None):
    """Decode over a contiguous cache: pages [B, L, 2H, D], token b is sequence b."""
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    pos = md.kv_lens - 1
    pages = cache.pages.at[jnp.arange(batch), pos].set(interleave_kv(k, v).astype(q.dtype))
    keys, values = split_kv(pages)
    qg = q.reshape(batch, num_kv_heads, num_q_heads // num_kv_heads, head_dim)
    s = jnp.einsum("bhgd,blhd->bhgl", qg, keys, preferred_element_type=jnp.float32) * sm_scale
    valid = (jnp.arange(pages.shape[1])[None, :] < md.kv_lens[:, None])[:, None, None, :]
    p = jax.nn.softmax(jnp.where(valid, s, MASK_VALUE), axis=-1)
    out = jnp.einsum("bhgl,blhd->bhgd", p, values.astype(jnp.float32))
    return out.reshape(batch, num_q_heads, head_dim).astype(q.dtype), LayerKV(pages, None)


def dense_decode_step_s(model, kv_lens: np.ndarray, max_len: int, reps: int = 20) -> float:
    """Median seconds of one jitted greedy decode step over a dense [B, L] cache."""
    graphdef, state = nnx.split(model)
    cfg, batch = model.cfg, len(kv_lens)
    shape = (batch, max_len, 2 * cfg.num_kv_heads, cfg.head_dim)
    caches = [LayerKV(jnp.zeros(shape, model.dtype), None) for _ in range(cfg.num_layers)]
    zeros = jnp.zeros(batch, jnp.int32)
    md = AttentionMetadata(zeros, zeros, jnp.asarray(kv_lens, jnp.int32), zeros, zeros, zeros)

    def step(state, caches, tokens, md):
        m = nnx.merge(graphdef, state)
        hidden, caches = m(tokens, md.kv_lens - 1, caches, md, attention=dense_decode_attention)
        return jnp.argmax(m.logits(hidden), axis=-1).astype(jnp.int32), caches

    step = jax.jit(step, donate_argnums=(1,))
    tokens = jnp.ones(batch, jnp.int32)
    times = []
    for _ in range(reps + 2):
        start = time.perf_counter()
        tokens, caches = jax.block_until_ready(step(state, caches, tokens, md))
        times.append(time.perf_counter() - start)
    return float(np.median(times[2:]))


def decode_run(engine: LLMEngine, prompts, batch: int, output_len: int) -> dict[str, np.ndarray]:
    """Serve ``batch`` requests together; per full-batch decode step (runs of consecutive
    steps only): host, device and blocked seconds and the period to the next step's start."""
    engine.generate(prompts[:batch], SamplingParams(max_tokens=output_len, ignore_eos=True))
    steps = engine.steps_frame()
    full = steps[(steps["num_decode_seqs"] == batch) & (steps["num_seqs"] == batch)]
    index, start = full["step"].to_numpy(), full["start_s"].to_numpy()
    consecutive = np.diff(index) == 1
    return {
        "host_s": full["host_s"].to_numpy(),
        "device_s": full["device_s"].to_numpy(),
        "blocked_s": full["host_blocked_s"].to_numpy(),
        "period_s": np.diff(start)[consecutive],
    }


def decode_at_batch(args, model, tokenizer, prompts) -> dict[str, float]:
    batch = args.decode_batch
    engine = engine_for(args, model, tokenizer, batch)
    for mode in ("off", "on"):
        # Warm both modes' host paths and, on, the device-side token merge at every shape
        # the timed runs use (the same batch, a few decode steps), untimed.
        engine.reset(dataclasses.replace(engine.config, async_scheduling=mode == "on"))
        engine.generate(prompts[:batch], SamplingParams(max_tokens=4, ignore_eos=True))
    runs: dict[str, list[dict[str, np.ndarray]]] = {"off": [], "on": []}
    for trial in range(args.decode_trials):
        # Alternate which mode goes first, so drift on the machine favours neither.
        for mode in ("off", "on") if trial % 2 == 0 else ("on", "off"):
            engine.reset(dataclasses.replace(engine.config, async_scheduling=mode == "on"))
            runs[mode].append(decode_run(engine, prompts, batch, args.output_len))

    def cat(mode: str, key: str) -> np.ndarray:
        return np.concatenate([r[key] for r in runs[mode]])

    host, device = cat("off", "host_s"), cat("off", "device_s")
    device_step = float(np.median(device))
    period = {mode: float(np.median(cat(mode, "period_s"))) for mode in runs}
    kv_lens = np.asarray([len(p) + 16 for p in prompts[:batch]])
    dense_s = dense_decode_step_s(model, kv_lens, engine.config.scheduler.max_model_len)
    return {
        "decode_steps": float(len(device)),
        "host_share_pct": float(100 * host.sum() / (host + device).sum()),
        "host_share_async_pct": float(100 * max(0.0, 1 - device_step / period["on"])),
        "host_blocked_async_pct": float(
            100 * cat("on", "blocked_s").sum() / cat("on", "period_s").sum()
        ),
        "decode_tok_s_sync": batch / period["off"],
        "decode_tok_s_async": batch / period["on"],
        "async_gain_pct": float(100 * (period["off"] / period["on"] - 1)),
        "engine_decode_step_ms": 1000 * device_step,
        "dense_decode_step_ms": 1000 * dense_s,
        "paging_overhead": device_step / dense_s,
    }


def main() -> None:
    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="HF model dir (default: shipped)")
    p.add_argument("--dtype", default=None, help="bfloat16 | float32 (default: f32 on CPU)")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--min-input", type=int, default=128)
    p.add_argument("--max-input", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="step token budget (a throughput setting: prefill in few, large steps)",
    )
    p.add_argument(
        "--attention-backend",
        default="auto",
        help="auto | cpu | xla | pallas (auto: the native kernels on CPU when they build)",
    )
    p.add_argument("--hf-batch-size", type=int, default=64)
    p.add_argument("--decode-batch", type=int, default=32)
    p.add_argument("--decode-trials", type=int, default=2, help="decode runs per async mode")
    p.add_argument("--decode-only", action="store_true", help="skip the transformers comparison")
    p.add_argument(
        "--torch-threads",
        default=f"1,{os.cpu_count() or 1}",
        help="torch thread counts to try; the best counts (oversubscription can cripple torch)",
    )
    p.add_argument("--skip-continuous", action="store_true", help="skip generate_batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    args.dtype = args.dtype or ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    path = args.model or default_model_path()
    tokenizer = Tokenizer.from_dir(path)
    prompts = heldout_prompts(tokenizer, args.requests, args.min_input, args.max_input, args.seed)
    model, _ = load_model(path, args.dtype)
    if args.decode_only:
        result = decode_at_batch(args, model, tokenizer, prompts)
        result["backend"] = jax.default_backend()
        print(json.dumps(result) if args.json else decode_report(args, result))
        return

    import torch
    from transformers import AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval()
    result = {"engine_tok_s": run_engine(args, model, tokenizer, prompts)}
    by_threads = {}
    for threads in sorted({int(t) for t in args.torch_threads.split(",")}):
        torch.set_num_threads(threads)
        by_threads[threads] = run_hf_static(args, hf, prompts, tokenizer.eos_id or 0)
    best_threads = max(by_threads, key=by_threads.get)
    torch.set_num_threads(best_threads)
    result["torch_threads"] = best_threads
    result["static_tok_s_by_threads"] = by_threads
    hf_modes = {"static": by_threads[best_threads]}
    if not args.skip_continuous and hasattr(hf, "generate_batch"):
        try:
            hf_modes["continuous"] = run_hf_continuous(args, hf, prompts)
        except Exception as e:  # an optional mode; report why it could not run
            result["continuous_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    result["transformers_tok_s"] = hf_modes
    result["ratio"] = result["engine_tok_s"] / max(hf_modes.values())
    result |= decode_at_batch(args, model, tokenizer, prompts)
    result["backend"] = jax.default_backend()
    result["attention_backend"] = resolve_backend_name(args.attention_backend)
    if args.json:
        print(json.dumps(result))
        return
    engine = f"engine ({result['attention_backend']}):"
    print(f"{engine:<26}{result['engine_tok_s']:10.1f} output tok/s")
    for mode, tok_s in hf_modes.items():
        print(f"transformers ({mode}):{' ' * (11 - len(mode))}{tok_s:10.1f} output tok/s")
    if "continuous_error" in result:
        print(f"transformers (continuous): unavailable: {result['continuous_error']}")
    print(f"(transformers with torch threads = {best_threads}; tried {sorted(by_threads)})")
    print(f"ratio (engine / best):    {result['ratio']:10.2f}x   (target >= 2)")
    print(decode_report(args, result))


def decode_report(args, result: dict) -> str:
    """The decode half of the report: async scheduling off and on, side by side."""
    b = args.decode_batch
    ours, dense = result["engine_decode_step_ms"], result["dense_decode_step_ms"]
    return "\n".join(
        [
            f"decode at batch {b}:        async off    async on",
            f"  decode tok/s:         {result['decode_tok_s_sync']:10.1f}  "
            f"{result['decode_tok_s_async']:10.1f}   ({result['async_gain_pct']:+.1f}%)",
            f"  host share:           {result['host_share_pct']:9.1f}%  "
            f"{result['host_share_async_pct']:9.1f}%   (target <= 10 with async on)",
            f"  host blocked (on):               {result['host_blocked_async_pct']:9.1f}%",
            f"paging overhead:          {result['paging_overhead']:10.2f}x   (target <= 1.25; "
            f"{ours:.2f} ms vs dense {dense:.2f} ms)",
        ]
    )


if __name__ == "__main__":
    main()
