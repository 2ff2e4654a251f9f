"""Prompt and output text: the chat template (the model's own, else the default) and stop
strings cut from detokenized output, never sent and then taken back while streaming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claimbench.models.checkpoint import default_model_path
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.chat import DEFAULT_TEMPLATE, ChatTemplate
from claimbench.serving.api.generation import OutputAssembler
from claimbench.serving.api.protocol import ChatMessage

MESSAGES = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(
        role="user", content=[{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]
    ),
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(default_model_path())


def test_the_models_own_template_is_used_when_present(tmp_path: Path):
    template = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    template += "{% if add_generation_prompt %}[assistant] {% endif %}"
    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": template}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    chat = ChatTemplate.for_model(tmp_path)
    assert chat.render(MESSAGES) == "<s>[system] Be brief.\n[user] Hi!\n[assistant] "
    assert chat.render(MESSAGES, add_generation_prompt=False).endswith("[user] Hi!\n")


def test_the_default_template_without_one():
    chat = ChatTemplate.for_model(default_model_path())  # the shipped model has none
    assert chat.template.render  # compiled
    text = chat.render(MESSAGES)
    assert text == "<|system|>\nBe brief.\n<|user|>\nHi!\n<|assistant|>\n"
    assert ChatTemplate(DEFAULT_TEMPLATE).render(MESSAGES) == text


def test_a_failing_template_is_a_value_error(tmp_path: Path):
    refuses = (
        "{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
    )
    with pytest.raises(ValueError, match="chat template failed.*no system role"):
        ChatTemplate(refuses).render(MESSAGES)
    assert ChatTemplate(refuses).render(MESSAGES[1:]) == ""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x | nope }}"}))
    with pytest.raises(ValueError, match="does not compile"):
        ChatTemplate.for_model(tmp_path)


def stream(tokenizer: Tokenizer, text: str, stop: list[str]) -> tuple[list[str], bool]:
    assembler = OutputAssembler(tokenizer, stop)
    sent = []
    for token_id in tokenizer.encode(text, add_bos=False):
        sent.append(assembler.push(token_id))
        if assembler.stopped:
            break
    sent.append(assembler.finish())
    return sent, assembler.stopped


def test_stop_string_spanning_tokens_is_cut_and_never_sent(tokenizer):
    text = "def main():\n    return parse(argv)\n"
    ids = tokenizer.encode(text, add_bos=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    # A stop string that starts inside one token and ends inside a later one.
    joined_at = len(pieces[0]) + len(pieces[1]) - 1
    stop = text[joined_at : joined_at + 5]
    sent, stopped = stream(tokenizer, text, [stop])
    assert stopped
    assert "".join(sent) == text[: text.index(stop)]


def test_without_a_stop_everything_is_sent_as_it_comes(tokenizer):
    text = "for i in range(10):\n    print(i)\n"
    sent, stopped = stream(tokenizer, text, [])
    assert not stopped and "".join(sent) == text
    assert sum(1 for s in sent if s) > 5  # streamed token by token, not held to the end


def test_holdback_is_released_at_the_end(tokenizer):
    sent, stopped = stream(tokenizer, "x = 1\ny = 2\n", ["never-there"])
    assert not stopped and "".join(sent) == "x = 1\ny = 2\n"
