"""Held-out language-modelling quality: loss and perplexity per token and per byte.

Per-byte numbers make models with different tokenizers comparable: the summed
negative log-likelihood of the target tokens divided by the UTF-8 bytes they spell.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tokenizers import pre_tokenizers

from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import HELDOUT_FILE, heldout_token_windows


@dataclass(frozen=True)
class HeldoutEval:
    num_windows: int
    num_tokens: int  # predicted (target) tokens
    num_bytes: int  # UTF-8 bytes those tokens spell
    loss_per_token: float  # mean NLL in nats
    loss_per_byte: float  # summed NLL / bytes, nats

    @property
    def ppl_per_token(self) -> float:
        return float(np.exp(self.loss_per_token))

    @property
    def ppl_per_byte(self) -> float:
        return float(np.exp(self.loss_per_byte))

    @property
    def bits_per_byte(self) -> float:
        return self.loss_per_byte / float(np.log(2))


def token_byte_lengths(tokenizer: Tokenizer) -> np.ndarray:
    """i64[vocab]: UTF-8 bytes each id spells (0 for special tokens).

    Byte-level BPE writes each byte as one character of a fixed 256-character alphabet,
    so a token's byte count is its string length; other vocabularies fall back to the
    UTF-8 length of the token string.
    """
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    special = {t.content for t in tokenizer.tokenizer.get_added_tokens_decoder().values()}
    lengths = np.zeros(tokenizer.vocab_size, np.int64)
    for token_id in range(tokenizer.vocab_size):
        token = tokenizer.tokenizer.id_to_token(token_id)
        if token is None or token in special:
            continue
        lengths[token_id] = len(token) if set(token) <= alphabet else len(token.encode())
    return lengths


def _window_nll(model: LlamaForCausalLM, windows: jax.Array) -> jax.Array:
    """i32[B, L+1] -> f32[B, L] NLL of tokens 1..L given the ones before."""
    logits = model.forward_dense(windows[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:])


def evaluate_heldout(
    model: LlamaForCausalLM,
    tokenizer: Tokenizer,
    *,
    num_windows: int = 64,
    length: int = 256,
    seed: int = 0,
    batch_size: int = 16,
    heldout_path=HELDOUT_FILE,
) -> HeldoutEval:
    """Mean held-out NLL over ``num_windows`` seeded windows of ``length`` predicted tokens."""
    windows = heldout_token_windows(tokenizer, num_windows, length + 1, seed, heldout_path)
    graphdef, state = nnx.split(model)
    nll_fn = jax.jit(lambda state, w: _window_nll(nnx.merge(graphdef, state), w))
    total_nll = 0.0
    for start in range(0, num_windows, batch_size):
        nll = nll_fn(state, jnp.asarray(windows[start : start + batch_size]))
        total_nll += float(jnp.sum(nll))
    num_tokens = num_windows * length
    num_bytes = int(token_byte_lengths(tokenizer)[windows[:, 1:]].sum())
    return HeldoutEval(
        num_windows=num_windows,
        num_tokens=num_tokens,
        num_bytes=num_bytes,
        loss_per_token=total_nll / num_tokens,
        loss_per_byte=total_nll / max(num_bytes, 1),
    )
