"""Tokenizer: the ``tokenizers`` library's tokenizer.json with BOS/EOS handling and streaming.

``StreamDecoder`` turns generated ids into text incrementally. A byte-level BPE token
can end in the middle of a multi-byte UTF-8 character, so text is only emitted once
the decoded suffix no longer ends in the replacement character U+FFFD.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

TOKENIZER_FILE = "tokenizer.json"
REPLACEMENT_CHAR = "\ufffd"


class Tokenizer:
    """Wraps a ``tokenizers.Tokenizer``; ids are plain ``list[int]``."""

    def __init__(self, tokenizer: HFTokenizer, bos_id: int | None, eos_id: int | None) -> None:
        vocab_size = tokenizer.get_vocab_size()
        for name, tok in (("bos_id", bos_id), ("eos_id", eos_id)):
            if tok is not None and not 0 <= tok < vocab_size:
                raise ValueError(f"{name}={tok} outside the tokenizer's vocab of {vocab_size}")
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_id = eos_id

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load ``path/tokenizer.json``; BOS/EOS ids come from ``path/config.json`` if present."""
        path = Path(path)
        file = path / TOKENIZER_FILE
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing")
        tokenizer = HFTokenizer.from_file(str(file))
        bos_id = eos_id = None
        config = path / "config.json"
        if config.is_file():
            d = json.loads(config.read_text())
            bos_id = d.get("bos_token_id")
            eos_id = d.get("eos_token_id")
            if isinstance(eos_id, list):
                eos_id = eos_id[0] if eos_id else None
        return cls(tokenizer, bos_id, eos_id)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Text -> ids, with BOS prepended when asked and the model has one."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            return [self.bos_id, *ids]
        return ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts -> ids without BOS (parallel in the Rust library)."""
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        """Ids -> text; BOS/EOS and other special tokens dropped unless ``skip_special=False``."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special)

    def save(self, path: str | Path) -> None:
        """Write ``path/tokenizer.json``."""
        Path(path).mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(Path(path) / TOKENIZER_FILE))

    def stream_decoder(self) -> StreamDecoder:
        return StreamDecoder(self)


class StreamDecoder:
    """Incremental detokenization: ``push(id)`` returns the newly completed text (maybe "").

    Decodes a window of the ids since the last emitted boundary and emits the part past
    what was already printed, holding back while the tail is an incomplete character.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0  # ids before this are fully emitted and never re-decoded
        self.read_offset = 0  # ids in [prefix_offset, read_offset) produced the emitted text

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset : self.read_offset])
        full = self.tokenizer.decode(self.ids[self.prefix_offset :])
        if full.endswith(REPLACEMENT_CHAR) or len(full) <= len(prefix):
            return ""
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)
        return full[len(prefix) :]

    def flush(self) -> str:
        """Whatever is still held back (e.g. a truncated character at the end of a stream)."""
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset : self.read_offset])
        full = self.tokenizer.decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix) :]
