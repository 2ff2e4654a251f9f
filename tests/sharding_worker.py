"""Run in a fresh process by test_sharding.py: engines at tp = 1, 2, 4 over 8 virtual CPU
devices, printing one JSON object of greedy tokens and per-device bytes.

``jax_num_cpu_devices`` must be set before JAX starts its backend, which a pytest process
has long done; hence a process of its own. Usage: ``python sharding_worker.py CASE [DIR]``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from engine_helpers import TINY_MODEL, dense_logits, tiny_engine  # noqa: E402

from claimbench.engine.sampling_params import SamplingParams  # noqa: E402
from claimbench.models.llama import LlamaForCausalLM  # noqa: E402
from claimbench.models.quantize import with_weight_format  # noqa: E402

# Llama: 4 query heads over 2 KV heads (tp=4 replicates each KV head twice); untied head
# over a vocabulary of 97 (no tp divides it: the head stays replicated).
LLAMA = TINY_MODEL
# Qwen2: q/k/v biases, one KV head for 4 query heads (tp=2 and 4 replicate it), a vocabulary
# of 128 (the untied head is vocab-split).
QWEN2 = dataclasses.replace(
    TINY_MODEL,
    architecture="Qwen2ForCausalLM",
    vocab_size=128,
    num_kv_heads=1,
    attention_bias=True,
)
PROMPTS = [[3, 5, 7], [11, 13, 17, 19, 23, 29, 31, 37, 41], [43, 47, 53, 59, 61]]
MAX_TOKENS = 6


def dense_greedy(model: LlamaForCausalLM, prompt: list[int]) -> list[int]:
    """Greedy tokens from the unsharded dense forward (engine_helpers.dense_logits: jitted
    once per model over padded ids), one token at a time."""
    ids = list(prompt)
    for _ in range(MAX_TOKENS):
        ids.append(int(np.argmax(dense_logits(model, ids)[-1])))
    return ids[len(prompt) :]


def serve(model: LlamaForCausalLM, **overrides) -> dict:
    """Greedy tokens at one token bucket: the prompts' step and the decode steps share one
    compiled program (each compile over 8 devices is what these cases spend most time on)."""
    engine = tiny_engine(model, token_buckets=(32,), **overrides)
    outs = engine.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    return {"tokens": [o.token_ids for o in outs], "describe": engine.describe()}


def shapes_case() -> dict:
    """Llama and Qwen2 shapes at tp = 1, 2, 4 on the XLA backend, with the dense reference."""
    result = {}
    for name, cfg in (("llama", LLAMA), ("qwen2", QWEN2)):
        model = LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(1))
        # The biases start at zero; random ones make the bias split count.
        for layer in model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                if proj.bias is not None:
                    shape = proj.bias.get_value().shape
                    noise = np.random.default_rng(0).normal(0, 0.05, shape)
                    proj.bias.set_value(jnp.asarray(noise, jnp.float32))
        result[name] = {
            "dense": [dense_greedy(model, p) for p in PROMPTS],
            **{str(tp): serve(model, tp=tp, attention_backend="xla") for tp in (1, 2, 4)},
        }
    return result


def formats_case() -> dict:
    """tp=2 against tp=1 for the native and Pallas backends, int8 / fp8 KV and int8 weights."""
    model = LlamaForCausalLM(LLAMA, dtype=jnp.float32, rngs=nnx.Rngs(2))
    variants = {
        "cpu": ({"attention_backend": "cpu"}, model),
        "pallas": ({"attention_backend": "pallas"}, model),
        "kv_int8": ({"attention_backend": "xla", "kv_dtype": "int8"}, model),
        "kv_fp8": ({"attention_backend": "xla", "kv_dtype": "fp8"}, model),
        "w_int8": ({"attention_backend": "xla", "weights": "int8"}, None),
    }
    result = {}
    for name, (overrides, served) in variants.items():
        if served is None:
            served = with_weight_format(model, overrides["weights"])
        result[name] = {str(tp): serve(served, tp=tp, **overrides) for tp in (1, 2)}
    return result


def experiment_case(work_dir: str) -> dict:
    """The tp-refutation experiment at tiny size on a random checkpoint written to work_dir:
    its measurements (labels parsed) and the saved requests frame's (tp, trial) pairs."""
    from tenant_exp_helpers import run_tiny, write_checkpoint

    checkpoint = write_checkpoint(Path(work_dir) / "tiny")
    params = {
        "batch": 4,
        "prompt_len": 8,
        "output_len": 6,
        "engine": {
            "dtype": "float32",
            "page_size": 8,
            "max_num_seqs": 4,
            "max_num_batched_tokens": 32,
            "token_buckets": [32],  # one program per tp to precompile, as in serve()
            "max_model_len": 64,
        },
    }
    ctx = run_tiny("tp-refutation", checkpoint, trials=2, base={}, **params)
    rows = ctx.measurements_frame("run").to_dict("records")
    requests = ctx.frames()["requests"]
    pairs = sorted(set(zip(requests["tp"].tolist(), requests["trial"].tolist(), strict=True)))
    return {"rows": rows, "request_frames": pairs, "num_requests": len(requests)}


if __name__ == "__main__":
    cases = {"shapes": shapes_case, "formats": formats_case, "experiment": experiment_case}
    print(json.dumps(cases[sys.argv[1]](*sys.argv[2:]), default=str))
