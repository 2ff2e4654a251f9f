"""The speculative-decoding options `generate` and `bench` share."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from claimbench.engine.config import MAX_SPEC_TOKENS


class Speculative(StrEnum):
    """Who proposes draft tokens (engine.config.SPECULATIVE); none = plain decoding."""

    none = "none"
    draft = "draft"
    ngram = "ngram"


SpeculativeOption = Annotated[
    Speculative,
    typer.Option(help="Speculative decoding: a draft model or n-gram prompt lookup proposes."),
]
NumSpecTokensOption = Annotated[
    int, typer.Option(help=f"Draft tokens per step, 1..{MAX_SPEC_TOKENS}.")
]
DraftModelOption = Annotated[
    Path | None,
    typer.Option(help="Draft model directory (same tokenizer); default: claimbench-tiny-draft."),
]
