"""A verify step against a decode step, side by side, on the device step alone.

    python benchmarks/verify_step.py [--batches 1,8,32] [--num-spec-tokens 4] [--backend auto]

The shipped claimbench-tiny, every sequence holding a ``--context``-token prefix in the cache:
a decode step feeds each of ``batch`` sequences one token (the engine without speculation),
a verify step feeds each 1 + k (its last token and k draft tokens, the engine with
speculation: attention over the chunks, logits at every position, acceptance). The verify
step runs twice: its chunks through the attention backend's prefill path (one sequence at a
time, as before the verify path) and through the verify path (kernels/xla_verify.py, every
chunk at once; what the engine runs). Each step is compiled first, then timed ``--reps``
times, the three arms in turn; the medians and the ratios to decode are printed per batch.
Only the jitted step runs: no scheduling, no host work.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import numpy as np
from flax import nnx

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import allocate_kv_cache, page_layout, resolve_kv_dtype
from claimbench.engine.worker.batch import StepInputs, empty_inputs
from claimbench.engine.worker.buckets import pick_pair
from claimbench.engine.worker.runner import StaticModel, step_fn
from claimbench.kernels.backend import get_backend, resolve_backend_name
from claimbench.models.checkpoint import default_model_path, load_model
from claimbench.models.llama import rope_table
from claimbench.platform.jax_platforms import set_default_jax_platforms

step = jax.jit(step_fn, static_argnums=(0, 1), donate_argnums=(4,))


def step_inputs(cfg: EngineConfig, batch: int, context: int, width: int) -> StepInputs:
    """``batch`` sequences each with ``context`` cached tokens feeding ``width`` new ones."""
    token_bucket, seq_bucket = pick_pair(cfg, batch * width, batch)
    inputs = empty_inputs(cfg, token_bucket, seq_bucket)
    md, page_size = inputs.md, cfg.cache.page_size
    rng = np.random.default_rng(0)
    k = cfg.spec_tokens
    for i in range(batch):
        pages = 1 + i * cfg.pages_per_seq + np.arange(cfg.pages_per_seq)
        md.page_indices[i] = pages
        positions = np.arange(context, context + width, dtype=np.int32)
        rows = slice(i * width, (i + 1) * width)
        inputs.token_ids[rows] = rng.integers(3, 4000, width)
        inputs.positions[rows] = positions
        md.slot_mapping[rows] = pages[positions // page_size] * page_size + positions % page_size
        md.kv_lens[i] = context + width
        md.cu_q_lens[i + 1] = (i + 1) * width
        last = i * width
        inputs.logits_indices[i] = last + np.minimum(np.arange(1 + k), width - 1)
        if width > 1:
            inputs.draft_tokens[i] = inputs.token_ids[rows][1:]
            inputs.num_draft[i] = width - 1
    md.cu_q_lens[batch + 1 :] = batch * width
    md.num_seqs[0] = batch
    num_decode = batch if width == 1 else 0
    md.distribution[:] = (num_decode, num_decode, batch)
    return inputs


class Arm:
    """One jitted step variant with its own KV cache (donated and replaced each call)."""

    def __init__(self, model, cfg: EngineConfig, attention) -> None:
        graphdef, state = nnx.split(model)
        self.weights, treedef = jax.tree.flatten(state)
        self.static = StaticModel(graphdef, treedef, attention)
        backend = resolve_backend_name(cfg.model.attention_backend)
        num_pages = 1 + cfg.scheduler.max_num_seqs * cfg.pages_per_seq
        self.kv_caches = allocate_kv_cache(
            page_layout(model.cfg, backend),
            num_pages,
            cfg.cache.page_size,
            resolve_kv_dtype("auto", model.dtype),
            attention_backend=backend,
        )
        self.rope = jax.device_put(rope_table(model.cfg, cfg.scheduler.max_model_len))

    def timed(self, inputs: StepInputs) -> float:
        start = time.perf_counter()
        out, self.kv_caches = step(
            self.static, False, self.weights, self.rope, self.kv_caches, inputs
        )
        jax.block_until_ready(out)
        return time.perf_counter() - start


def main() -> None:
    set_default_jax_platforms()  # before JAX starts a backend: no TPU runtime off a TPU host
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--num-spec-tokens", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    k = args.num_spec_tokens
    path = default_model_path()
    model, _ = load_model(path, args.dtype)
    plain = EngineConfig(
        model_path=path,
        dtype=args.dtype,
        attention_backend=args.backend,
        max_num_seqs=max(batches),
        max_num_batched_tokens=max(batches) * (1 + k),
        max_model_len=args.context + 64,
        num_spec_tokens=k,
    )
    spec = dataclasses.replace(plain, speculative="ngram")
    base = get_backend(args.backend)
    arms = {
        "decode": (Arm(model, plain, base), plain, 1),
        "verify_prefill_path": (Arm(model, spec, base), spec, 1 + k),
        "verify": (Arm(model, spec, get_backend(args.backend, verify_width=1 + k)), spec, 1 + k),
    }
    rows = []
    for batch in batches:
        inputs = {
            name: step_inputs(cfg, batch, args.context, width)
            for name, (_, cfg, width) in arms.items()
        }
        for name, (arm, _, _) in arms.items():
            arm.timed(inputs[name])  # compile
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.reps):
            for name, (arm, _, _) in arms.items():
                times[name].append(arm.timed(inputs[name]))
        row = {"batch": batch} | {
            f"{name}_ms": 1e3 * float(np.median(t)) for name, t in times.items()
        }
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return
    print(f"resolved backend: {resolve_backend_name(args.backend)}, k = {k}")
    print(f"{'batch':>6}{'decode ms':>11}{'verify ms (prefill path)':>26}{'verify ms':>14}")
    for r in rows:
        d = r["decode_ms"]
        before, after = r["verify_prefill_path_ms"], r["verify_ms"]
        print(
            f"{r['batch']:>6}{d:>11.2f}{before:>14.2f} ({before / d:4.2f}x){after:>8.2f}"
            f" ({after / d:4.2f}x)"
        )


if __name__ == "__main__":
    main()
