"""Which draft may propose for a target: loading one and checking that its token ids mean
the same tokens (vocabulary size, and the tokenizers' vocabularies when both are known)."""

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
    """ValueError naming the mismatch when a draft cannot propose for the target: its token
    ids must mean the same tokens (vocabulary size, and the tokenizers' vocabularies)."""
    if draft.vocab_size != target.vocab_size:
        raise ValueError(
            f"draft model's vocabulary ({draft.vocab_size}) differs from the target's "
            f"({target.vocab_size})"
        )
    both = draft_tokenizer is not None and tokenizer is not None
    if both and draft_tokenizer.tokenizer.get_vocab() != tokenizer.tokenizer.get_vocab():
        raise ValueError("draft model's tokenizer differs from the target's")


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
