"""Train the shipped models: a byte-level BPE tokenizer and two small Llama decoders.

Corpus: the running interpreter's stdlib source (workload/corpus.py), ~5% of files held
out by path hash. The target ``claimbench-tiny`` and its draft ``claimbench-tiny-draft``
share one tokenizer; the draft has at most 1/8 of the target's parameters so that
speculative decoding has something to gain. Training is seeded: the same interpreter,
library versions and step count give the same weights.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from claimbench.models.checkpoint import ASSETS_DIR, save_model
from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM, param_count
from claimbench.models.tokenizer import Tokenizer
from claimbench.workload.corpus import (
    heldout_files,
    read_source,
    token_stream,
    training_files,
    write_heldout,
)

BOS_TOKEN, EOS_TOKEN = "<|bos|>", "<|eos|>"
VOCAB_SIZE = 4096
HELDOUT_MAX_BYTES = 2_000_000
TARGET_NAME, DRAFT_NAME = "claimbench-tiny", "claimbench-tiny-draft"
SAVE_DTYPE = "bfloat16"  # halves the shipped bytes; the engine serves in bf16 by default

TARGET_CONFIG = ModelConfig(
    vocab_size=VOCAB_SIZE,
    hidden_size=256,
    intermediate_size=768,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    max_position_embeddings=2048,
    bos_token_id=0,
    eos_token_id=1,
)
DRAFT_CONFIG = replace(
    TARGET_CONFIG,
    hidden_size=80,
    intermediate_size=256,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=40,
)

# role -> (directory name, architecture, peak learning rate); the smaller draft tolerates
# a higher rate. The draft also trains for fewer steps (defaults 1000 vs 500): with this
# little compute a small model keeps pace with a large one per token, and a draft as good
# as its target would not be the weaker, cheaper proposer speculative decoding assumes.
SHIPPED = {
    "target": (TARGET_NAME, TARGET_CONFIG, 3e-3),
    "draft": (DRAFT_NAME, DRAFT_CONFIG, 4e-3),
}


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int = 8
    seq_len: int = 512
    peak_lr: float = 2e-3
    end_lr_fraction: float = 0.1  # cosine decays to peak_lr * this
    warmup_steps: int = 40
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 50

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len", "log_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.peak_lr < 1:
            raise ValueError(f"peak_lr must be in (0, 1), got {self.peak_lr}")


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Byte-level BPE over ``texts`` with BOS = id 0 and EOS = id 1."""
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    # The BOS the model trains with, written into tokenizer.json as Llama 3 writes its own:
    # transformers and vLLM add it from text as we do (neither reads add_bos_token there).
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B:1",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    return Tokenizer(tokenizer, bos_id, tokenizer.token_to_id(EOS_TOKEN))


def _optimizer(tc: TrainConfig) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=tc.peak_lr,
        warmup_steps=tc.warmup_steps,
        decay_steps=max(tc.steps, tc.warmup_steps + 1),
        end_value=tc.peak_lr * tc.end_lr_fraction,
    )
    # Decay matrices only: norm scales are ones-initialised gains, not weights to shrink.
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)
    return optax.chain(
        optax.clip_by_global_norm(tc.grad_clip),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=tc.weight_decay, mask=decay_mask),
    )


def make_train_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation) -> Callable:
    """A jitted (params, opt_state, batch i32[B, S+1]) -> (params, opt_state, loss) step."""

    def loss_fn(params, batch):
        logits = nnx.merge(graphdef, params).forward_dense(batch[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    @jax.jit
    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


def sample_batch(stream: np.ndarray, rng: np.random.Generator, tc: TrainConfig) -> np.ndarray:
    """i32[batch_size, seq_len + 1] windows at uniform random offsets of the token stream."""
    starts = rng.integers(0, len(stream) - tc.seq_len - 1, size=tc.batch_size)
    return np.stack([stream[s : s + tc.seq_len + 1] for s in starts])


def train_model(
    cfg: ModelConfig,
    tc: TrainConfig,
    stream: np.ndarray,
    *,
    console: Console,
    name: str = "model",
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train an f32 model on random windows of ``stream``; returns it and the per-step losses."""
    if len(stream) <= tc.seq_len + 1:
        raise ValueError(f"token stream of {len(stream)} is shorter than seq_len={tc.seq_len}")
    model = LlamaForCausalLM(cfg, dtype=jnp.float32, rngs=nnx.Rngs(tc.seed))
    graphdef, params = nnx.split(model)
    tx = _optimizer(tc)
    opt_state = tx.init(params)
    step_fn = make_train_step(graphdef, tx)
    rng = np.random.default_rng(tc.seed)
    losses: list[float] = []
    columns = (
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    start = time.perf_counter()
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(name, total=tc.steps, loss=float("nan"))
        for step in range(tc.steps):
            batch = jnp.asarray(sample_batch(stream, rng, tc))
            params, opt_state, loss = step_fn(params, opt_state, batch)
            if (step + 1) % tc.log_every == 0 or step + 1 == tc.steps:
                losses.append(float(loss))
                progress.update(task, loss=losses[-1])
                # A plain line too, so a log file of a non-interactive run shows progress.
                elapsed = time.perf_counter() - start
                progress.console.log(
                    f"{name} step {step + 1}/{tc.steps} loss {losses[-1]:.4f} "
                    f"({(step + 1) / elapsed:.2f} steps/s)"
                )
            progress.advance(task)
    return nnx.merge(graphdef, params), losses


def save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    """tokenizer.json plus the tokenizer_config.json transformers' AutoTokenizer reads."""
    tokenizer.save(path)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "add_bos_token": True,
        "clean_up_tokenization_spaces": False,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def load_sources(files: list[Path]) -> list[str]:
    """The texts of ``files`` in order, skipping ones that are not UTF-8."""
    return [t for t in (read_source(f) for f in files) if t is not None]


def train_shipped(
    out_dir: Path = ASSETS_DIR,
    *,
    which: str = "both",
    target_steps: int = 1000,
    draft_steps: int = 500,
    seed: int = 0,
    batch_size: int = TrainConfig.batch_size,
    seq_len: int = TrainConfig.seq_len,
    stdlib_root: Path | None = None,
    console: Console | None = None,
) -> dict[str, Path]:
    """Produce the shipped assets under ``out_dir``; returns {model name: directory}.

    "target" and "both" train a fresh tokenizer and write heldout.txt.gz; "draft" reuses
    the target's tokenizer from ``out_dir`` so the pair stays compatible. ``stdlib_root``
    replaces the running interpreter's stdlib as the corpus (tests use a small tree).
    """
    if which not in ("target", "draft", "both"):
        raise ValueError(f"which must be target, draft or both, got {which!r}")
    console = console or Console()
    train_texts = load_sources(training_files(stdlib_root))
    console.log(f"corpus: {len(train_texts)} training files, {sum(map(len, train_texts))} chars")
    if which == "draft":
        tokenizer = Tokenizer.from_dir(out_dir / TARGET_NAME)
    else:
        tokenizer = train_tokenizer(train_texts)
        kept = write_heldout(
            load_sources(heldout_files(stdlib_root)), out_dir / "heldout.txt.gz", HELDOUT_MAX_BYTES
        )
        console.log(f"tokenizer: vocab {tokenizer.vocab_size}; held-out: {len(kept)} documents")
    stream = token_stream(tokenizer, train_texts)
    console.log(f"training stream: {len(stream)} tokens")
    steps = {"target": target_steps, "draft": draft_steps}
    written = {}
    for role in ("target", "draft") if which == "both" else (which,):
        name, cfg, peak_lr = SHIPPED[role]
        cfg = replace(cfg, vocab_size=tokenizer.vocab_size)
        tc = TrainConfig(
            steps=steps[role], batch_size=batch_size, seq_len=seq_len, peak_lr=peak_lr, seed=seed
        )
        start = time.perf_counter()
        model, losses = train_model(cfg, tc, stream, console=console, name=name)
        path = out_dir / name
        save_model(model, cfg, path, dtype=SAVE_DTYPE)
        save_tokenizer(tokenizer, path)
        console.log(
            f"{name}: {param_count(model)} params, final loss {losses[-1]:.4f}, "
            f"{time.perf_counter() - start:.0f} s -> {path}"
        )
        written[name] = path
    return written
