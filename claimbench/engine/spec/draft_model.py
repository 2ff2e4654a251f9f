"""Which draft may propose for a target: loading one and checking that its token ids mean
the same tokens. The draft's vocabulary may be a prefix of the target's (the same tokenizer,
the target's embedding padded with rows no token uses, as Qwen2.5-7B's 152,064 rows against
Qwen2.5-0.5B's 151,936): it proposes ids below its own size, and verification, which compares
tokens only (worker/acceptance.accept), never reads the rows beyond them."""

from __future__ import annotations

from pathlib import Path

from claimbench.models.config import ModelConfig
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.tokenizer import Tokenizer


def check_draft(
    draft: ModelConfig,
    target: ModelConfig,
    draft_tokenizer: Tokenizer | None,
    tokenizer: Tokenizer | None,
) -> None:
    """ValueError (one line) naming the mismatch when a draft cannot propose for the target:
    its vocabulary no larger than the target's, the same BOS/EOS ids where both configs name
    them, the same tokenizer vocabulary where both are known, and an embedding row for every
    id the target's tokenizer produces."""
    if draft.vocab_size > target.vocab_size:
        raise ValueError(
            f"draft model's vocabulary ({draft.vocab_size}) is larger than the target's "
            f"({target.vocab_size}): it could propose ids the target has no row for"
        )
    for name in ("bos_token_id", "eos_token_id"):
        ours, theirs = getattr(draft, name), getattr(target, name)
        if ours is not None and theirs is not None and ours != theirs:
            raise ValueError(
                f"draft model's {name} ({ours}) differs from the target's ({theirs}): "
                "not the same tokenizer"
            )
    both = draft_tokenizer is not None and tokenizer is not None
    if both and draft_tokenizer.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
        raise ValueError("draft model's tokenizer differs from the target's")
    if tokenizer is not None and tokenizer.vocab_size > draft.vocab_size:
        raise ValueError(
            f"draft model's vocabulary ({draft.vocab_size}) is smaller than the tokenizer's "
            f"({tokenizer.vocab_size}): some token ids have no draft embedding"
        )


def load_draft_model(
    path: Path | None, dtype: str, target: ModelConfig, tokenizer: Tokenizer | None
) -> LlamaForCausalLM:
    """The draft at ``path`` (None = the shipped claimbench-tiny-draft), checked against the
    target (``check_draft``)."""
    from claimbench.models.checkpoint import default_draft_path, load_model, read_config

    path = Path(path) if path is not None else default_draft_path()
    draft_tokenizer = Tokenizer.from_dir(path) if (path / "tokenizer.json").is_file() else None
    check_draft(read_config(path), target, draft_tokenizer, tokenizer)
    model, _ = load_model(path, dtype)
    return model
