"""Tokenizer wrapper: BOS/EOS handling, round trips, streaming multi-byte characters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import processors

from claimbench.models.tokenizer import StreamDecoder, Tokenizer
from claimbench.training.train import save_tokenizer, train_tokenizer

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    x: int = 0\n    y: int = 0\n",
    "# café, naïve, 日本語, emoji 🐍 and ∑ symbols\n",
    "for i in range(10):\n    print(i)\n",
] * 5


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    # A vocab barely above the 256 bytes: multi-byte characters stay split across tokens.
    return train_tokenizer(TEXTS, vocab_size=300)


def test_bos_eos_ids_and_add_bos(tokenizer: Tokenizer) -> None:
    assert (tokenizer.bos_id, tokenizer.eos_id) == (0, 1)
    ids = tokenizer.encode("x = 1")
    assert ids[0] == tokenizer.bos_id and tokenizer.bos_id not in ids[1:]
    assert tokenizer.encode("x = 1", add_bos=False) == ids[1:]


@pytest.mark.parametrize("text", TEXTS[:4] + ["  leading spaces", "", "\n\n\t"])
def test_round_trip(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_decode_drops_special_unless_asked(tokenizer: Tokenizer) -> None:
    ids = [*tokenizer.encode("pass"), tokenizer.eos_id]
    assert tokenizer.decode(ids) == "pass"
    assert tokenizer.decode(ids, skip_special=False) == "<|bos|>pass<|eos|>"


def test_stream_decoder_never_emits_partial_characters(tokenizer: Tokenizer) -> None:
    text = TEXTS[2]
    ids = tokenizer.encode(text, add_bos=False)
    # The test only means something if some character spans several tokens.
    assert any("\ufffd" in tokenizer.decode([i]) for i in ids)
    stream = tokenizer.stream_decoder()
    pieces = [stream.push(i) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + stream.flush() == text
    assert "" in pieces  # held back at least once mid-character


def test_stream_decoder_flushes_truncated_character(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("ok 🐍", add_bos=False)
    stream = tokenizer.stream_decoder()
    emitted = "".join(stream.push(i) for i in ids[:-1])
    assert emitted == "ok "
    assert stream.flush() == tokenizer.decode(ids[:-1])[len("ok ") :]


def test_from_dir_bos_from_the_tokenizer_eos_from_config(tmp_path: Path, tokenizer: Tokenizer):
    save_tokenizer(tokenizer, tmp_path)  # tokenizer.json's post-processor prepends <|bos|>
    # config.json's bos_token_id names the model's BOS, not whether a prompt gets one.
    (tmp_path / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [1, 0]}))
    loaded = Tokenizer.from_dir(tmp_path)
    assert (loaded.bos_id, loaded.eos_id) == (0, 1)
    assert loaded.encode("a") == tokenizer.encode("a") == [0, *tokenizer.encode("a", add_bos=False)]
    # Without a post-processor, tokenizer_config.json's add_bos_token decides.
    saved = json.loads((tmp_path / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps({**saved, "post_processor": None}))
    assert Tokenizer.from_dir(tmp_path).encode("a") == tokenizer.encode("a")
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": False}))
    assert Tokenizer.from_dir(tmp_path).encode("a") == tokenizer.encode("a", add_bos=False)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({**config, "bos_token": "<|missing|>"})
    )
    with pytest.raises(ValueError, match=r"add_bos_token with bos_token='<\|missing\|>'"):
        Tokenizer.from_dir(tmp_path)


def test_a_post_processor_adding_more_than_a_bos_is_refused(tmp_path: Path, tokenizer: Tokenizer):
    save_tokenizer(tokenizer, tmp_path)
    appends = Tokenizer.from_dir(tmp_path).tokenizer
    appends.post_processor = processors.TemplateProcessing(
        single="$A <|eos|>", pair="$A $B", special_tokens=[("<|eos|>", 1)]
    )
    appends.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer.json: post_processor adds \[1\]"):
        Tokenizer.from_dir(tmp_path)


def test_from_dir_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tokenizer.json is missing"):
        Tokenizer.from_dir(tmp_path)


def test_special_id_outside_vocab_rejected(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="eos_id=5000 outside the tokenizer's vocab of 300"):
        Tokenizer(tokenizer.tokenizer, 0, 5000)


class CountingDecode:
    """The wrapped tokenizer, recording how many ids each decode call got."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.lengths: list[int] = []

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        self.lengths.append(len(ids))
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def get_vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


def test_stream_decoder_decodes_once_per_token_over_a_bounded_window(
    tokenizer: Tokenizer,
) -> None:
    text = "".join(TEXTS[:4]) * 3  # long, with characters split across tokens
    ids = tokenizer.encode(text, add_bos=False)
    counting = CountingDecode(tokenizer.tokenizer)
    stream = Tokenizer(counting, tokenizer.bos_id, tokenizer.eos_id).stream_decoder()
    assert "".join(stream.push(i) for i in ids) + stream.flush() == text
    window = StreamDecoder.WINDOW
    # One decode per token, plus one per window move (every WINDOW - 1 tokens at most).
    assert len(counting.lengths) <= len(ids) + len(ids) // (window - 1) + 1
    # A window never grows with the output: at most WINDOW ids past an emission point,
    # plus the ids of a character still held back (a few bytes' worth).
    assert max(counting.lengths) <= 2 * window
    assert len(ids) > 10 * window


def test_unreadable_tokenizer_json_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"model": 1}')
    with pytest.raises(ValueError, match="tokenizer.json is not a tokenizer"):
        Tokenizer.from_dir(tmp_path)
