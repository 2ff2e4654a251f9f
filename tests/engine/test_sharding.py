"""Tensor parallelism (engine/worker/sharding.py): the spec table, KV-head replication, bad tp, and
engines over 8 virtual CPU devices giving the unsharded greedy tokens at tp = 1, 2, 4.

The multi-device engines run in a subprocess (tests/sharding_worker.py): the CPU device count
must be set before JAX starts its backend, which this pytest process already has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from claimbench.engine.kv.kv_cache import allocate_kv_cache
from claimbench.engine.worker.sharding import (
    PAGES,
    REPLICATED,
    ROW_SCALES,
    cache_spec,
    check_tp,
    kv_replicas,
    param_spec,
    replicate_kv_heads,
)
from claimbench.kernels.kv_quant import FP8_DTYPE, LayerKV
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.quantize import with_weight_format
from tests.engine_helpers import TINY_MODEL, tiny_model

WORKER = Path(__file__).resolve().parents[1] / "sharding_worker.py"
F32 = 4


@cache
def worker(case: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(WORKER), case], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected_weight_bytes(cfg: ModelConfig, tp: int) -> int:
    """f32 bytes one device holds by the spec: q, k, v, gate, up split on output and o, down
    on input (so each /tp), KV heads replicated up to tp, norms and embeddings whole, the
    untied head vocab-split when tp divides the vocabulary."""
    d, hd, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    kv_heads = max(cfg.num_kv_heads, tp)
    split = 2 * d * cfg.num_heads * hd + 2 * d * kv_heads * hd + 3 * d * f
    bias = (cfg.num_heads + 2 * kv_heads) * hd if cfg.attention_bias else 0
    # Llama's o_proj bias (Qwen2 has none) is added after the all-reduce: replicated.
    bias_o = d if cfg.attention_bias and cfg.architecture == "LlamaForCausalLM" else 0
    per_layer = (split + bias) // tp + bias_o + 2 * d
    head = cfg.vocab_size * d
    head_bytes = head // tp if cfg.vocab_size % tp == 0 else head
    return F32 * (cfg.num_layers * per_layer + cfg.vocab_size * d + head_bytes + d)


def expected_kv_bytes(cfg: ModelConfig, tp: int, pool_bytes: int, page_size: int) -> int:
    """f32 KV bytes one device holds: the per-device pool filled with whole pages of its own
    KV heads (max(num_kv_heads, tp) / tp of them)."""
    local_heads = max(cfg.num_kv_heads, tp) // tp
    page_bytes = page_size * cfg.num_layers * 2 * local_heads * cfg.head_dim * F32
    return pool_bytes // page_bytes * page_bytes


# -- the table and the checks (this process, one device) --------------------------------------


def test_param_spec_table() -> None:
    assert param_spec("layers/0/self_attn/q_proj/kernel", (64, 64), 2) == P(None, "tp")
    assert param_spec("layers/0/self_attn/k_proj/bias", (32,), 2) == P("tp")
    assert param_spec("layers/1/mlp/down_proj/kernel", (128, 64), 2) == P("tp", None)
    assert param_spec("layers/1/self_attn/o_proj/qvalue", (64, 64), 4) == P("tp", None)
    # o_proj's per-output-channel scale and bias are added after the all-reduce: whole.
    assert param_spec("layers/1/self_attn/o_proj/scale", (64,), 4) == REPLICATED
    assert param_spec("layers/1/mlp/up_proj/scale", (128,), 4) == P("tp")
    assert param_spec("embed_tokens/embedding", (128, 64), 2) == REPLICATED
    assert param_spec("lm_head/kernel", (64, 128), 4) == P(None, "tp")
    # 97 rows over 2 devices do not split evenly: the head stays whole.
    assert param_spec("lm_head/kernel", (64, 97), 2) == REPLICATED
    assert param_spec("norm/weight", (64,), 2) == REPLICATED


def test_cache_spec_splits_pages_and_int8_scales_but_not_fp8() -> None:
    pages = jnp.zeros((4, 8, 4, 16))
    assert cache_spec(LayerKV(pages, None)) == LayerKV(PAGES, None)
    assert cache_spec(LayerKV(pages, jnp.ones((4, 8, 4)))) == LayerKV(PAGES, ROW_SCALES)
    assert cache_spec(LayerKV(pages, jnp.ones((4, 128)))) == LayerKV(PAGES, P(None, "tp"))
    assert cache_spec(LayerKV(pages, jnp.ones(2))) == LayerKV(PAGES, REPLICATED)


@pytest.mark.parametrize(
    ("tp", "heads", "kv_heads", "devices", "message"),
    [
        (8, 4, 2, 4, "tp=8 exceeds the 4 devices present"),
        (4, 12, 6, 8, "tp=4 does not divide the model's 6 KV heads"),
        (4, 6, 2, 8, "tp=4 does not divide the model's 6 query heads"),
        (3, 6, 2, 8, "tp=3 divides neither the model's 2 KV heads"),
        (0, 4, 2, 8, "tp must be >= 1, got 0"),
    ],
)
def test_check_tp_names_the_values(tp, heads, kv_heads, devices, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_tp(tp, heads, kv_heads, devices)


def test_check_tp_accepts_replicable_kv_heads() -> None:
    check_tp(4, 8, 2, 8)
    check_tp(8, 8, 1, 8)
    assert (kv_replicas(4, 2), kv_replicas(2, 2), kv_replicas(8, 1)) == (2, 1, 8)


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["bf16", "int8"])
def test_replicated_kv_heads_compute_the_same_logits(weights: str) -> None:
    model = with_weight_format(tiny_model(), weights)
    copy = replicate_kv_heads(model, 2)
    ids = jnp.asarray([[3, 5, 7, 11, 13, 17]], jnp.int32)
    np.testing.assert_allclose(
        copy.forward_dense(ids), model.forward_dense(ids), rtol=1e-5, atol=1e-5
    )
    assert copy.cfg.num_kv_heads == 2 * model.cfg.num_kv_heads
    # The given model is left as it was (the engine may be handed a shared one).
    assert model.cfg == TINY_MODEL
    k_proj = model.layers[0].self_attn.k_proj
    leaf = k_proj.kernel if weights == "bf16" else k_proj.qvalue
    assert leaf.get_value().shape[1] == TINY_MODEL.num_kv_heads * TINY_MODEL.head_dim


def test_engine_config_rejects_tp_zero() -> None:
    from claimbench.engine.config import EngineConfig

    with pytest.raises(ValueError, match="tp must be > 0, got 0"):
        EngineConfig(tp=0)


def test_tp_beyond_the_devices_present_is_a_value_error() -> None:
    from tests.engine_helpers import tiny_engine

    n = len(jax.devices())
    with pytest.raises(ValueError, match=f"tp={n + 1} exceeds the {n} devices present"):
        tiny_engine(tp=n + 1)


def test_tp1_describe_on_one_device(monkeypatch) -> None:
    from tests.engine_helpers import tiny_engine

    # The spec's bytes: with the native matmul the device also holds the packed head
    # (tests/kernels/test_native_dense.py counts those).
    monkeypatch.setenv("CLAIMBENCH_NATIVE_DENSE", "xla")
    engine = tiny_engine(model=LlamaForCausalLM(TINY_MODEL, dtype=jnp.float32, rngs=nnx.Rngs(3)))
    info = engine.describe()
    assert (info["tp"], info["kv_replicas"], info["kv_heads_per_device"]) == (1, 1, 2)
    assert info["weight_bytes_per_device"] == expected_weight_bytes(TINY_MODEL, 1)


# -- engines over 8 virtual devices (subprocess) -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama", "qwen2"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_sharded_greedy_tokens_match_unsharded(model: str, tp: int) -> None:
    result = worker("shapes")[model]
    dense = result["dense"]
    # The workload discriminates: the model does not emit one token for everything.
    assert len({t for row in dense for t in row}) > 3
    assert result[str(tp)]["tokens"] == dense


@pytest.mark.slow
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_per_device_bytes_follow_the_specs(tp: int) -> None:
    import dataclasses

    pool, page_size = 64 * 8 * 2 * 2 * TINY_MODEL.num_kv_heads * 16 * F32, 8
    shapes = worker("shapes")
    qwen2 = dataclasses.replace(
        TINY_MODEL,
        architecture="Qwen2ForCausalLM",
        vocab_size=128,
        num_kv_heads=1,
        attention_bias=True,
    )
    for name, cfg in (("llama", TINY_MODEL), ("qwen2", qwen2)):
        info = shapes[name][str(tp)]["describe"]
        assert info["tp"] == tp
        assert info["kv_replicas"] == max(1, tp // cfg.num_kv_heads)
        assert info["weight_bytes_per_device"] == expected_weight_bytes(cfg, tp), name
        assert info["kv_cache_bytes_per_device"] == expected_kv_bytes(cfg, tp, pool, page_size)
        assert info["kv_cache_bytes"] == tp * info["kv_cache_bytes_per_device"]
        if info["kv_replicas"] > 1:
            assert "replicated" in info["kv_heads"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["cpu", "pallas", "kv_int8", "kv_fp8", "w_int8"])
def test_tp2_matches_tp1_for_every_backend_and_format(variant: str) -> None:
    result = worker("formats")[variant]
    assert len({t for row in result["1"]["tokens"] for t in row}) > 3
    assert result["2"]["tokens"] == result["1"]["tokens"]


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "dtype"), [("kv_int8", jnp.int8), ("kv_fp8", FP8_DTYPE)])
def test_each_device_holds_an_unsharded_cache_of_its_own_kv_heads(variant, dtype) -> None:
    """int8 scales are split with their rows (each device: the scales of its own heads);
    fp8's (k, v) scales are whole on every device."""
    import dataclasses

    info = worker("formats")[variant]["2"]["describe"]
    local = dataclasses.replace(TINY_MODEL, num_kv_heads=TINY_MODEL.num_kv_heads // 2)
    caches = jax.eval_shape(
        lambda: allocate_kv_cache(local, info["num_pages"], 8, dtype, attention_backend="xla")
    )
    expected = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(caches))
    assert info["kv_cache_bytes_per_device"] == expected
    assert info["kv_cache_bytes"] == 2 * expected
    # The pool is sized per device: what one device holds fits the tp=1 budget.
    assert expected <= 64 * 8 * 2 * 2 * 2 * 16 * F32
    assert info["num_pages"] > worker("formats")[variant]["1"]["describe"]["num_pages"]


# -- the CLI: --tp, its virtual devices and bad input -------------------------------------------


def test_requested_devices_reads_tp_and_every_run() -> None:
    from claimbench.platform.cpu_devices import RUN_DEVICES, requested_devices

    assert requested_devices(["generate", "hi", "--tp", "4"]) == 4
    assert requested_devices(["bench", "--tp=2"]) == 2
    assert requested_devices(["generate", "hi", "--tp", "1"]) is None
    assert requested_devices(["generate", "hi", "--tp", "x"]) is None  # the command rejects it
    assert requested_devices(["run", "--claim", "tp-refutation"]) == RUN_DEVICES
    assert requested_devices(["run", "--claim=tp-refutation"]) == RUN_DEVICES
    assert requested_devices(["run", "--all"]) == RUN_DEVICES
    # Every run gets the same count, whichever claims it names: a claim alone and in --all
    # run on the same devices.
    assert requested_devices(["run", "--claim", "kv-int8"]) == RUN_DEVICES
    assert requested_devices(["generate", "hi"]) is None


def test_device_count_set_only_on_cpu_and_never_over_the_users(monkeypatch) -> None:
    from claimbench.platform.cpu_devices import set_cpu_device_count

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    set_cpu_device_count(["generate", "hi", "--tp", "4"])
    assert os.environ["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=4"
    )
    set_cpu_device_count(["generate", "hi", "--tp", "8"])  # the count is already set
    assert os.environ["XLA_FLAGS"].endswith("device_count=4")
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.delenv("JAX_PLATFORMS")  # a TPU host: JAX chooses, real chips
    set_cpu_device_count(["generate", "hi", "--tp", "4"])
    assert "XLA_FLAGS" not in os.environ


def claimbench(*args: str, xla_flags: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    exe = Path(sys.executable).parent / "claimbench"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, check=False)


@pytest.mark.slow
def test_generate_at_tp2_streams_the_tp1_tokens() -> None:
    outs = {}
    for tp in ("1", "2"):
        args = ("--dtype", "float32", "generate", "def add(a, b):", "--max-tokens", "8")
        proc = claimbench(*args, "--tp", tp, "--json")
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[tp] = json.loads(proc.stdout)["token_ids"]
    assert len(outs["1"]) == 8 and outs["2"] == outs["1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "tp", "xla_flags", "message"),
    [
        # The shipped model has 4 query heads: 3 virtual devices exist, 3 does not divide 4.
        ("generate", "3", None, "--tp=3 does not divide the model's 4 query heads"),
        ("bench", "3", None, "--tp=3 does not divide the model's 4 query heads"),
        # The user's own device count stands.
        ("generate", "4", "--xla_force_host_platform_device_count=2", "--tp=4 exceeds the 2"),
        ("generate", "0", None, "--tp must be > 0, got 0"),
    ],
)
def test_bad_tp_is_one_line_and_exit_2(command, tp, xla_flags, message) -> None:
    args = ("generate", "hi") if command == "generate" else ("bench", "--requests", "1")
    proc = claimbench(*args, "--tp", tp, xla_flags=xla_flags)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
