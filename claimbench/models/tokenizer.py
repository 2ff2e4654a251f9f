"""Tokenizer: the ``tokenizers`` library's tokenizer.json with BOS/EOS handling and streaming.

Which special tokens a text gets is the tokenizer's own rule, as transformers and vLLM
apply it: tokenizer.json's ``post_processor`` when it has one (Llama 3's prepends
``<|begin_of_text|>``; Qwen2's adds nothing), else tokenizer_config.json's
``add_bos_token`` (with its ``bos_token``). config.json's ``bos_token_id`` says which id
the model was trained with, not whether a prompt gets one: Qwen2.5 names 151643 there and
its tokenizer adds no BOS.

``StreamDecoder`` turns generated ids into text incrementally. A byte-level BPE token
can end in the middle of a multi-byte UTF-8 character, so text is only emitted once
the decoded suffix no longer ends in the replacement character U+FFFD. It decodes once
per token: the streamed server calls it for every token of every stream.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from claimbench.models.json_files import read_json_object

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
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
        """Load ``path/tokenizer.json``. The BOS id is the one the tokenizer itself prepends
        (None if it adds none); the EOS id is the first of config.json's ``eos_token_id``.
        ValueError (one line naming the file) for a post-processor that adds anything but
        one leading token or a ``bos_token`` the vocabulary lacks."""
        path = Path(path)
        file = path / TOKENIZER_FILE
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing")
        try:
            tokenizer = HFTokenizer.from_file(str(file))
        except Exception as e:  # the Rust library raises a bare Exception on bad JSON
            raise ValueError(f"{file} is not a tokenizer the tokenizers library reads: {e}") from e
        if tokenizer.post_processor is not None:
            bos_id = _leading_special_id(tokenizer, file)
        else:
            bos_id = _add_bos_token_id(tokenizer, path / TOKENIZER_CONFIG_FILE)
        eos_id = None
        config = path / "config.json"
        if config.is_file():
            eos_id = read_json_object(config).get("eos_token_id")
            if isinstance(eos_id, list):
                eos_id = eos_id[0] if eos_id else None
        return cls(tokenizer, bos_id, eos_id)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Text -> ids, with BOS prepended when asked and the tokenizer adds one."""
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


def _leading_special_id(tokenizer: HFTokenizer, file: Path) -> int | None:
    """The id the tokenizer's post-processor puts before a text (None if it adds nothing).

    Read off an encoding with and without special tokens, so any post-processor type
    (TemplateProcessing, ByteLevel, a Sequence of them) is read the same way."""
    probe = "a"
    plain = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe, add_special_tokens=True).ids
    start = next(
        (i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), None
    )
    if start is None or start > 1 or len(full) != start + len(plain):
        added = [i for i in full if i not in plain]
        raise ValueError(
            f"{file}: post_processor adds {added} around a text; only one leading BOS is supported"
        )
    return full[0] if start == 1 else None


def _add_bos_token_id(tokenizer: HFTokenizer, config_file: Path) -> int | None:
    """``bos_token``'s id when tokenizer_config.json sets ``add_bos_token``, else None."""
    if not config_file.is_file():
        return None
    config = read_json_object(config_file)
    if not config.get("add_bos_token"):
        return None
    token = config.get("bos_token")
    token = token.get("content") if isinstance(token, dict) else token
    bos_id = tokenizer.token_to_id(token) if isinstance(token, str) else None
    if bos_id is None:
        raise ValueError(f"{config_file}: add_bos_token with bos_token={token!r}, not in the vocab")
    return bos_id


class StreamDecoder:
    """Incremental detokenization: ``push(id)`` returns the newly completed text (maybe "").

    One decode per token, of a short window: the ids from ``start`` (a point where all
    text before was emitted) to the newest. The window's text up to ``read_offset`` (the
    last id that completed text) is kept, so the new text is the decoded window past it,
    held back while it ends in an incomplete character. Once the window holds ``WINDOW``
    ids it starts again at the emission point before ``read_offset`` (one more decode, for
    its kept text), so a decode never grows with the output.
    """

    WINDOW = 4

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._decode = tokenizer.tokenizer.decode
        self.ids: list[int] = []
        self.start = 0  # ids before this are fully emitted and never decoded again
        self.read_offset = 0  # ids in [start, read_offset) produced ``self.text``
        self.previous_read = 0  # the emission point before read_offset
        self.text = ""  # the decoded ids[start:read_offset], all of it emitted

    def push(self, token_id: int) -> str:
        ids = self.ids
        ids.append(token_id)
        full = self._decode(ids[self.start :], skip_special_tokens=True)
        if full.endswith(REPLACEMENT_CHAR) or len(full) <= len(self.text):
            return ""
        new = full[len(self.text) :]
        self.previous_read, self.read_offset = self.read_offset, len(ids)
        if self.read_offset - self.start >= self.WINDOW:
            # The new window starts where text was last complete before this id (so
            # its first id decodes as it did in context, as vLLM's prefix offset).
            self.start = self.previous_read
            self.text = self._decode(ids[self.start :], skip_special_tokens=True)
        else:
            self.text = full
        return new

    def flush(self) -> str:
        """Whatever is still held back (e.g. a truncated character at the end of a stream)."""
        if self.read_offset == len(self.ids):
            return ""
        full = self._decode(self.ids[self.start :], skip_special_tokens=True)
        held = full[len(self.text) :]
        self.start = self.read_offset = self.previous_read = len(self.ids)
        self.text = ""
        return held
