"""Conformance against transformers: same checkpoints, same token ids -> same logits, same
greedy continuations. Covers the shipped models and random Llama-3 / Qwen2 checkpoints that
transformers itself writes (llama3 rope scaling, untied head; q/k/v bias, tied head)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from claimbench.models.checkpoint import default_draft_path, default_model_path, load_model
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import heldout_prompts, heldout_token_windows

# One torch thread: these models are tiny, and on a shared CPU torch's spinning worker
# threads make the token-by-token greedy loop several times slower, not faster.
torch.set_num_threads(1)

# f32 on both sides; differences come only from summation order in matmuls and softmax.
# Measured: ~3e-6 (random Llama-3, Qwen2), ~4e-5 on the shipped target (logits up to ~17).
LOGITS_ATOL = 1e-4
GREEDY_TOKENS = 32


def write_random_hf(path: Path, family: str) -> Path:
    """A small randomly initialised checkpoint saved by transformers' own save_pretrained."""
    torch.manual_seed(0)
    common = dict(
        vocab_size=211,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.1,  # peakier random logits: greedy argmax far from ties
        bos_token_id=1,
        eos_token_id=2,
    )
    if family == "llama3":
        config = transformers.LlamaConfig(
            **common,
            head_dim=16,
            tie_word_embeddings=False,
            rope_theta=50000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**common, tie_word_embeddings=True, rope_theta=1e6)
        model = transformers.Qwen2ForCausalLM(config)
        with torch.no_grad():  # transformers zero-initialises biases; make them matter
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.5)
    model.save_pretrained(path)
    return path


def load_hf(path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.as_tensor(ids, dtype=torch.long)).logits.float().numpy()


def hf_greedy(model, prompt: list[int], num_tokens: int) -> list[int]:
    """transformers' forward, argmax, append: plain greedy without stop tokens."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(num_tokens):
            logits = model(torch.as_tensor([ids], dtype=torch.long)).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt) :]


def our_greedy(model: LlamaForCausalLM, prompts: list[list[int]], num_tokens: int):
    """Batched greedy on forward_dense over a right-padded buffer (one compiled shape)."""
    lens = np.asarray([len(p) for p in prompts])
    width = int(lens.max()) + num_tokens
    buf = np.zeros((len(prompts), width), np.int32)
    for i, p in enumerate(prompts):
        buf[i, : len(p)] = p
    graphdef, state = nnx.split(model)

    @jax.jit
    def next_tokens(state, ids, lens):
        valid = jnp.arange(width)[None, :] < lens[:, None]
        logits = nnx.merge(graphdef, state).forward_dense(ids, valid)
        last = jnp.take_along_axis(logits, (lens - 1)[:, None, None], axis=1)[:, 0]
        return jnp.argmax(last, axis=-1)

    for _ in range(num_tokens):
        nxt = np.asarray(next_tokens(state, jnp.asarray(buf), jnp.asarray(lens)))
        buf[np.arange(len(prompts)), lens] = nxt
        lens = lens + 1
    return [buf[i, len(p) : len(p) + num_tokens].tolist() for i, p in enumerate(prompts)]


@pytest.fixture(scope="module", params=["llama3", "qwen2-bias"])
def random_checkpoint(request, tmp_path_factory) -> Path:
    family = "llama3" if request.param == "llama3" else "qwen2"
    return write_random_hf(tmp_path_factory.mktemp(request.param), family)


@pytest.mark.slow
def test_random_checkpoint_logits_match(random_checkpoint: Path) -> None:
    ids = np.random.default_rng(0).integers(0, 211, (3, 100))
    ours, _ = load_model(random_checkpoint, "float32")
    theirs = hf_logits(load_hf(random_checkpoint), ids)
    diff = np.abs(np.asarray(ours.forward_dense(jnp.asarray(ids))) - theirs).max()
    assert diff < LOGITS_ATOL, diff


@pytest.mark.slow
def test_random_checkpoint_greedy_matches(random_checkpoint: Path) -> None:
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 211, n).tolist() for n in (1, 7, 20, 45)]
    ours, _ = load_model(random_checkpoint, "float32")
    hf = load_hf(random_checkpoint)
    expected = [hf_greedy(hf, p, GREEDY_TOKENS) for p in prompts]
    assert our_greedy(ours, prompts, GREEDY_TOKENS) == expected


@pytest.fixture(scope="module", params=["target", "draft"])
def shipped(request) -> Path:
    return default_model_path() if request.param == "target" else default_draft_path()


@pytest.mark.slow
def test_shipped_logits_match(shipped: Path) -> None:
    tokenizer = Tokenizer.from_dir(shipped)
    ids = heldout_token_windows(tokenizer, 4, 256, seed=0)
    ours, _ = load_model(shipped, "float32")
    theirs = hf_logits(load_hf(shipped), ids)
    diff = np.abs(np.asarray(ours.forward_dense(jnp.asarray(ids))) - theirs).max()
    assert diff < LOGITS_ATOL, diff


@pytest.mark.slow
def test_shipped_greedy_matches(shipped: Path) -> None:
    tokenizer = Tokenizer.from_dir(shipped)
    prompts = heldout_prompts(tokenizer, 4, 4, 60, seed=0)
    assert len({len(p) for p in prompts}) == 4
    ours, _ = load_model(shipped, "float32")
    hf = load_hf(shipped)
    expected = [hf_greedy(hf, p, GREEDY_TOKENS) for p in prompts]
    assert our_greedy(ours, prompts, GREEDY_TOKENS) == expected


@pytest.mark.slow
def test_shipped_tokenizer_matches_transformers() -> None:
    path = default_model_path()
    ours = Tokenizer.from_dir(path)
    theirs = transformers.AutoTokenizer.from_pretrained(path)
    text = "def f(x):\n    return {'é': x ** 2}  # ∑ 🐍\n"
    assert theirs(text, add_special_tokens=False).input_ids == ours.encode(text, add_bos=False)
    assert theirs.bos_token_id == ours.bos_id and theirs.eos_token_id == ours.eos_id
