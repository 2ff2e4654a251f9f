"""Chat messages -> prompt text, with the model's chat template when it has one.

A Hugging Face model directory may carry a Jinja ``chat_template`` in
tokenizer_config.json; it is rendered in Jinja's sandbox with ``messages``,
``add_generation_prompt``, ``bos_token`` and ``eos_token``, as transformers does. A
model without one (the shipped claimbench-tiny is a base model trained on Python source)
gets DEFAULT_TEMPLATE: each message as ``<|role|>`` on its own line followed by its
content, then ``<|assistant|>`` for the reply.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from claimbench.serving.protocol import ChatMessage

DEFAULT_TEMPLATE = (
    "{% for message in messages %}<|{{ message.role }}|>\n{{ message.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


class ChatTemplate:
    """A compiled chat template and the special-token strings it may use."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise  # templates refuse bad input with it (HF)
        try:
            self.template = env.from_string(source)
        except TemplateError as e:
            raise ValueError(f"the chat template does not compile: {e}") from e
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def for_model(cls, model_dir: Path) -> ChatTemplate:
        """The template of ``model_dir/tokenizer_config.json``, or the default; ValueError
        if it does not compile."""
        config_file = Path(model_dir) / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: take the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        return cls(source if isinstance(source, str) else DEFAULT_TEMPLATE, bos, eos)

    def render(self, messages: list[ChatMessage], add_generation_prompt: bool = True) -> str:
        """The prompt text; ValueError if the template fails on these messages."""
        plain = [{"role": m.role, "content": m.text(), "name": m.name} for m in messages]
        try:
            return self.template.render(
                messages=plain,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except TemplateError as e:
            raise ValueError(f"the chat template failed on these messages: {e}") from e


def _raise(message: str) -> None:
    raise TemplateError(message)


def _token_text(token: object) -> str:
    """A special token as tokenizer_config writes it: a string or {"content": ...}."""
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return token if isinstance(token, str) else ""
