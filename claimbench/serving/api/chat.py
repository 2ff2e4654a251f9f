"""Chat messages -> prompt text, with the model's chat template when it has one.

A Hugging Face model directory may carry a Jinja chat template: chat_template.jinja, else
``chat_template`` in tokenizer_config.json (transformers' order). It is rendered as
transformers' ``apply_chat_template`` renders it: Jinja's sandbox with ``trim_blocks`` and
``lstrip_blocks``, loop controls, a ``tojson`` that writes JSON unescaped,
``raise_exception``, ``strftime_now`` and the ``{% generation %}`` tag, given ``messages``,
``add_generation_prompt``, ``bos_token`` and ``eos_token``. A model without one (the
shipped claimbench-tiny is a base model trained on Python source) gets DEFAULT_TEMPLATE:
each message as ``<|role|>`` on its own line followed by its content, then
``<|assistant|>`` for the reply.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import TemplateError, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from claimbench.models.json_files import read_json_object
from claimbench.serving.api.protocol import ChatMessage

DEFAULT_TEMPLATE = (
    "{% for message in messages %}<|{{ message.role }}|>\n{{ message.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# The conversation a template must render before a server starts: one user turn.
PROBE_MESSAGES = [ChatMessage(role="user", content="Hello")]


class ChatTemplate:
    """A compiled chat template and the special-token strings it may use."""

    def __init__(
        self,
        source: str,
        bos_token: str = "",
        eos_token: str = "",
        origin: str = "the default template",
    ) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationTag]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise  # templates refuse bad input with it (HF)
        env.globals["strftime_now"] = _strftime_now  # Llama 3.2's "Today Date"
        try:
            self.template = env.from_string(source)
        except TemplateError as e:
            raise ValueError(f"{origin} does not compile: {e}") from e
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.origin = origin  # where the template came from, for the start-up line

    @classmethod
    def for_model(cls, model_dir: Path) -> ChatTemplate:
        """The template of ``model_dir`` (chat_template.jinja, else tokenizer_config.json's
        ``chat_template``), or the default; ValueError naming the file if it does not
        compile."""
        config_file = Path(model_dir) / TOKENIZER_CONFIG_FILE
        config = read_json_object(config_file) if config_file.is_file() else {}
        bos, eos = _token_text(config.get("bos_token")), _token_text(config.get("eos_token"))
        template_file = Path(model_dir) / TEMPLATE_FILE
        if template_file.is_file():
            return cls(template_file.read_text(), bos, eos, str(template_file))
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: take the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if isinstance(source, str):
            return cls(source, bos, eos, f"{config_file}'s chat_template")
        return cls(DEFAULT_TEMPLATE, bos, eos)

    def check(self) -> None:
        """ValueError (one line naming the template) unless it renders a one-turn chat: a
        server refuses such a template before its engine starts, not at the first request."""
        try:
            self.render(PROBE_MESSAGES)
        except ValueError as e:
            raise ValueError(f"{self.origin} fails to render a user turn: {e}") from e

    def render(
        self,
        messages: list[ChatMessage],
        add_generation_prompt: bool = True,
        max_chars: int | None = None,
    ) -> str:
        """The prompt text; ValueError if the template fails on these messages, or writes
        more than ``max_chars`` characters (it stops there: a template looping over its
        input cannot make the server build an unbounded string)."""
        plain = [_message(m) for m in messages]
        context = dict(
            messages=plain,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )
        try:
            if max_chars is None:
                return self.template.render(**context)
            pieces, num_chars = [], 0
            for piece in self.template.generate(**context):
                num_chars += len(piece)
                if num_chars > max_chars:
                    raise ValueError(
                        f"the chat template wrote over {max_chars} characters for these "
                        f"messages: more than the model's context can ever hold"
                    )
                pieces.append(piece)
            return "".join(pieces)
        except (TemplateError, OverflowError) as e:  # OverflowError: the sandbox's range cap
            raise ValueError(f"the chat template failed on these messages: {e}") from e


def _message(message: ChatMessage) -> dict[str, Any]:
    """A message as a client sends it to transformers: ``name`` only when given, since a
    template may test ``'name' in message``."""
    plain: dict[str, Any] = {"role": message.role, "content": message.text()}
    if message.name is not None:
        plain["name"] = message.name
    return plain


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' own: Jinja's built-in tojson escapes <, >, & and ' for HTML.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}``: transformers marks the assistant's text
    with it for training masks; rendered, it is its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _token_text(token: object) -> str:
    """A special token as tokenizer_config writes it: a string or {"content": ...}."""
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return token if isinstance(token, str) else ""
