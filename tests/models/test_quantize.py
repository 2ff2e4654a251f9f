"""Weight-only quantization: per-channel error bounds, the byte count, and the model's outputs."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import TINY_MODEL, tiny_model
from flax import nnx

from claimbench.models.llama import LlamaForCausalLM, weight_bytes
from claimbench.models.quantize import (
    QuantizedEmbedding,
    QuantizedLinear,
    quantize_weights,
    weight_format,
)


def _linear(kernel: np.ndarray, bias: np.ndarray | None = None) -> nnx.Linear:
    lin = nnx.Linear(kernel.shape[0], kernel.shape[1], use_bias=bias is not None, rngs=nnx.Rngs(0))
    lin.kernel[...] = jnp.asarray(kernel, jnp.float32)
    if bias is not None:
        lin.bias[...] = jnp.asarray(bias, jnp.float32)
    return lin


def test_int8_hand_computed_column_scales():
    # Column 0 has absmax 2.0, column 1 absmax 0.5: qwix's symmetric int8 scale is
    # absmax / 127.5, so the scales are 2/127.5 and 0.5/127.5 and 1.0 in column 0 is
    # round(1.0 * 127.5 / 2) = round(63.75) = 64.
    kernel = np.array([[2.0, 0.5], [1.0, -0.25]], np.float32)
    q = QuantizedLinear.from_linear(_linear(kernel), jnp.int8)
    np.testing.assert_allclose(q.scale[...], [2 / 127.5, 0.5 / 127.5], rtol=1e-6)
    assert q.qvalue[...].dtype == jnp.int8
    assert int(q.qvalue[...][1, 0]) == 64
    assert int(q.qvalue[...][1, 1]) == round(-0.25 * 127.5 / 0.5)  # -64 (half to even)
    # x = [1, 1]: y = qvalue.sum(0) * scale, the bias added after the scale.
    bias = np.array([10.0, -10.0], np.float32)
    qb = QuantizedLinear.from_linear(_linear(kernel, bias), jnp.int8)
    y = qb(jnp.ones((1, 2), jnp.float32))
    expected = np.asarray(qb.qvalue[...], np.float32).sum(0) * np.asarray(qb.scale[...]) + bias
    np.testing.assert_allclose(y[0], expected, rtol=1e-6)


@pytest.mark.parametrize("qtype", [jnp.int8, jnp.float8_e4m3fn])
def test_dequantized_error_within_rounding_bound(qtype):
    kernel = np.array(jax.random.normal(jax.random.key(0), (64, 48)), np.float32)
    kernel[:, 3] *= 100.0  # one loud channel must not cost the others precision
    q = QuantizedLinear.from_linear(_linear(kernel), qtype)
    scale = np.asarray(q.scale[...])
    deq = np.asarray(q.qvalue[...], np.float32) * scale
    err = np.abs(deq - kernel)
    if qtype == jnp.int8:
        bound = 0.5 * scale[None, :] * (1 + 1e-4)  # half a step
    else:
        # e4m3 keeps 3 mantissa bits (half-ulp relative error 2^-4); subnormals below
        # 2^-6 are spaced 2^-9 apart in units of the scale.
        bound = np.maximum(np.abs(kernel) * 2.0**-4, scale[None, :] * 2.0**-10) * (1 + 1e-4)
    assert (err <= bound).all()
    np.testing.assert_allclose(
        np.abs(kernel).max(0)[3] / scale[3], 127.5 if qtype == jnp.int8 else 448, rtol=1e-5
    )


def _quantized_pair(weights: str, cfg=TINY_MODEL):
    reference = tiny_model(cfg=cfg)
    return reference, quantize_weights(reference, weights)


@pytest.mark.parametrize(("weights", "tied"), [("int8", False), ("fp8", True)])
def test_every_matrix_quantized_and_bytes_counted(weights, tied):
    cfg = dataclasses.replace(TINY_MODEL, tie_word_embeddings=tied)
    reference, model = _quantized_pair(weights, cfg)
    assert isinstance(model.embed_tokens, QuantizedEmbedding)
    assert not any(isinstance(m, nnx.Linear) for _, m in nnx.iter_modules(model))
    d, hd, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    outs = [cfg.num_heads * hd, cfg.num_kv_heads * hd, cfg.num_kv_heads * hd, d, f, f, d]
    ins = [d, d, d, cfg.num_heads * hd, d, d, f]
    values = cfg.num_layers * sum(i * o for i, o in zip(ins, outs, strict=True))
    heads = 1 if cfg.tie_word_embeddings else 2  # the embedding table, an untied lm_head
    values += heads * cfg.vocab_size * d
    scales = cfg.num_layers * sum(outs) + heads * cfg.vocab_size
    norms = (2 * cfg.num_layers + 1) * d * 4  # f32 tiny model: norms stay f32
    assert weight_bytes(model) == values * 1 + scales * 4 + norms
    assert weight_bytes(reference) == values * 4 + norms


@pytest.mark.slow
@pytest.mark.parametrize(
    ("weights", "tied", "max_rel_err"),
    [
        ("int8", True, 0.02),
        ("fp8", False, 0.08),
    ],
)
def test_quantized_logits_close_to_full_precision(weights, tied, max_rel_err):
    cfg = dataclasses.replace(TINY_MODEL, tie_word_embeddings=tied)
    reference, model = _quantized_pair(weights, cfg)
    tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, TINY_MODEL.vocab_size)
    ref = reference.forward_dense(tokens)
    out = model.forward_dense(tokens)
    assert out.dtype == jnp.float32
    rel = float(jnp.linalg.norm(out - ref) / jnp.linalg.norm(ref))
    assert 0 < rel < max_rel_err


@pytest.mark.slow
def test_untied_head_quantized_logits_f32_and_jittable():
    cfg = dataclasses.replace(TINY_MODEL, tie_word_embeddings=False, attention_bias=True)
    reference, model = _quantized_pair("int8", cfg)
    assert isinstance(model.lm_head, QuantizedLinear)
    assert model.layers[0].self_attn.q_proj.bias is not None
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state, tokens):
        return nnx.merge(graphdef, state).forward_dense(tokens)

    tokens = jnp.arange(16, dtype=jnp.int32)[None]
    out = forward(state, tokens)
    ref = reference.forward_dense(tokens)
    assert out.dtype == jnp.float32
    assert float(jnp.linalg.norm(out - ref) / jnp.linalg.norm(ref)) < 0.02


@pytest.mark.slow
def test_input_untouched_format_reported_and_bad_input_raises():
    model = tiny_model()
    assert quantize_weights(model, "bf16") is model
    assert weight_format(model) == "bf16"
    with pytest.raises(ValueError, match="int4"):
        quantize_weights(model, "int4")
    fp8 = quantize_weights(model, "fp8")
    assert weight_format(fp8) == "fp8"
    assert isinstance(model.embed_tokens.embedding, nnx.Param)  # the input is unchanged
    assert weight_format(model) == "bf16"
    with pytest.raises(ValueError, match="already quantized to fp8"):
        quantize_weights(fp8, "int8")


@pytest.mark.slow
def test_bf16_model_stays_bf16_after_quantization():
    model = LlamaForCausalLM(TINY_MODEL, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    model = quantize_weights(model, "int8")
    tokens = jnp.arange(8, dtype=jnp.int32)[None]
    hidden = model.hidden_dense(tokens)
    assert hidden.dtype == jnp.bfloat16
    assert model.layers[0].mlp.up_proj(hidden).dtype == jnp.bfloat16
    assert model.logits(hidden).dtype == jnp.float32
