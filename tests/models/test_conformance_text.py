"""Same text in, same tokens out: conformance with transformers from text, on random
checkpoints transformers writes itself whose tokenizer files follow the Llama 3 and the
Qwen2 conventions (text_checkpoints.py): the prompt ids AutoTokenizer gives (BOS only where
the tokenizer adds one, whatever config.json names), chat templates rendered as
``apply_chat_template`` renders them, and greedy replies that end on any of the stop ids
generation_config.json lists, through `claimbench generate`, /v1/completions and
/v1/chat/completions, for the dense and the MoE model."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import torch
import transformers
from server_helpers import free_port
from text_checkpoints import (
    CHAT,
    CHATS,
    LLAMA3,
    NUM_TOKENS,
    QWEN2,
    TEXT,
    Family,
    chat_ids,
    write_checkpoint,
)
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.config import EngineConfig
from claimbench.models.checkpoint import (
    default_draft_path,
    default_model_path,
    default_moe_path,
    read_config,
)
from claimbench.models.tokenizer import Tokenizer
from claimbench.serving.api.chat import ChatTemplate
from claimbench.serving.api.protocol import ChatMessage
from claimbench.serving.server import ServeOptions, build_server_state, make_server

torch.set_num_threads(1)  # tiny models: torch's spinning threads only slow a shared CPU

CASES = {"llama3": ("llama", LLAMA3), "qwen2": ("qwen2", QWEN2), "mixtral": ("mixtral", QWEN2)}
TEXTS = [TEXT, "", "x = 1  # café ∑ 🐍\n", "  two leading spaces", "a <|im_start|> b 123456"]


@dataclass
class Checkpoint:
    path: Path
    family: Family
    hf_tokenizer: transformers.PreTrainedTokenizerBase
    hf_model: transformers.PreTrainedModel

    def id_of(self, token: str) -> int:
        return self.hf_tokenizer.convert_tokens_to_ids(token)

    def reply(self, prompt_ids: list[int]) -> tuple[list[int], str]:
        """transformers' greedy reply (generate, with generation_config.json's stop ids)."""
        with torch.no_grad():
            out = self.hf_model.generate(
                torch.as_tensor([prompt_ids]), max_new_tokens=NUM_TOKENS, do_sample=False
            )
        ids = out[0, len(prompt_ids) :].tolist()
        return ids, self.hf_tokenizer.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module", params=list(CASES))
def checkpoint(request, tmp_path_factory) -> Checkpoint:
    arch, family = CASES[request.param]
    path = write_checkpoint(tmp_path_factory.mktemp(request.param), arch, family)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return Checkpoint(path, family, transformers.AutoTokenizer.from_pretrained(path), model.eval())


@pytest.mark.slow
def test_prompt_ids_are_the_tokenizers_own(checkpoint: Checkpoint) -> None:
    ours = Tokenizer.from_dir(checkpoint.path)
    for text in TEXTS:
        assert ours.encode(text) == checkpoint.hf_tokenizer(text).input_ids, text
    bos = checkpoint.id_of(checkpoint.family.bos)
    # config.json names a BOS in both families; only Llama 3's tokenizer adds it.
    assert read_config(checkpoint.path).bos_token_id == bos
    assert (ours.encode(TEXT)[0] == bos) is checkpoint.family.adds_bos
    assert ours.encode(TEXT).count(bos) == int(checkpoint.family.adds_bos)


@pytest.mark.slow
def test_stop_ids_are_generation_configs(checkpoint: Checkpoint) -> None:
    family = checkpoint.family
    cfg = read_config(checkpoint.path)
    assert cfg.stop_token_ids == tuple(checkpoint.id_of(t) for t in family.generation_eos)
    # The text reply ends on an id config.json alone may not list (Qwen2: <|endoftext|>) and
    # the chat reply on the end-of-turn id (Llama 3: the last of three).
    text_reply, _ = checkpoint.reply(checkpoint.hf_tokenizer(TEXT).input_ids)
    chat_reply, _ = checkpoint.reply(chat_ids(checkpoint.hf_tokenizer, CHAT))
    assert text_reply[-1] == checkpoint.id_of(family.text_stop) and len(text_reply) < NUM_TOKENS
    assert chat_reply[-1] == checkpoint.id_of(family.chat_stop) and len(chat_reply) < NUM_TOKENS


@pytest.mark.slow
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_renders_as_transformers(checkpoint: Checkpoint, add_generation_prompt):
    template = ChatTemplate.for_model(checkpoint.path)
    for name, messages in CHATS.items():
        ours = template.render([ChatMessage(**m) for m in messages], add_generation_prompt)
        theirs = checkpoint.hf_tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )
        assert ours == theirs, name
        bos = checkpoint.family.bos
        assert ours.count(bos) == int(checkpoint.family.adds_bos), name  # written once, or never
    if checkpoint.family is QWEN2:  # its default system prompt, when the chat has none
        assert "You are Qwen, created by Alibaba Cloud." in template.render(
            [ChatMessage(**m) for m in CHATS["no system"]]
        )


def cli(path: Path, *args: str):
    return CliRunner().invoke(app, ["--model", str(path), "--dtype", "float32", *args])


@pytest.mark.slow
def test_generate_from_text_matches_transformers(checkpoint: Checkpoint) -> None:
    prompt = checkpoint.hf_tokenizer(TEXT).input_ids
    expected_ids, expected_text = checkpoint.reply(prompt)
    result = cli(checkpoint.path, "generate", TEXT, "--json", "--max-tokens", str(NUM_TOKENS))
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["prompt_tokens"] == len(prompt)
    assert payload["token_ids"] == expected_ids
    assert payload["text"] == expected_text
    assert payload["finish_reason"] == "stop"


@contextlib.contextmanager
def serving(path: Path) -> Iterator[tuple[str, list[str], object]]:
    """`claimbench serve`'s server over ``path`` (single tenant) on a free port: its URL, its
    start-up lines and its state."""
    options = ServeOptions(
        model_dir=path,
        engine=EngineConfig(
            dtype="float32",
            max_model_len=256,
            max_num_seqs=4,
            max_num_batched_tokens=64,
            kv_pool_bytes=8 * 2**20,
        ),
        port=free_port(),
        log_level="warning",
        shutdown_timeout_s=5,
    )
    state, lines = build_server_state(options)
    server = make_server(state, options)
    thread = threading.Thread(target=server.run, name="uvicorn-text", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{options.port}", lines, state
    finally:
        server.should_exit = True
        thread.join(60)


@pytest.mark.slow
def test_completions_and_chat_match_transformers(checkpoint: Checkpoint) -> None:
    family, name = checkpoint.family, checkpoint.path.name
    text_prompt = checkpoint.hf_tokenizer(TEXT).input_ids
    chat_prompt = chat_ids(checkpoint.hf_tokenizer, CHAT)
    with serving(checkpoint.path) as (url, lines, state), httpx.Client(timeout=120) as http:
        stops = ", ".join(f"{checkpoint.id_of(t)} {t}" for t in family.generation_eos)
        assert f"stop token ids: {stops} (from generation_config.json)" in lines
        assert (
            "chat template: "
            + str(checkpoint.path / "tokenizer_config.json")
            + ("'s chat_template")
            in lines
        )
        cases = [
            ("/v1/completions", {"prompt": TEXT}, text_prompt),
            ("/v1/chat/completions", {"messages": CHAT}, chat_prompt),
        ]
        for route, body, prompt in cases:
            expected_ids, expected_text = checkpoint.reply(prompt)
            body = {"model": name, "max_tokens": NUM_TOKENS, "temperature": 0, **body}
            response = http.post(url + route, json=body)
            assert response.status_code == 200, response.text
            choice, usage = response.json()["choices"][0], response.json()["usage"]
            text = choice["text"] if "text" in choice else choice["message"]["content"]
            assert (text, choice["finish_reason"]) == (expected_text, "stop"), route
            assert usage["prompt_tokens"] == len(prompt), route
            request = state.engine.diagnose("newest_request").result(timeout=30)
            assert request.prompt_token_ids == prompt, route  # one BOS or none, as theirs
            assert request.output_token_ids == expected_ids, route


def copy_without_weights(checkpoint: Checkpoint, dest: Path) -> Path:
    """The checkpoint's JSON files: enough for what is checked before weights load."""
    dest.mkdir()
    for file in checkpoint.path.glob("*.json"):
        shutil.copy(file, dest / file.name)
    return dest


def one_line_exit_2(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("file", ["generation_config.json", "config.json"])
def test_stop_id_outside_the_vocab_is_one_line_exit_2(checkpoint, tmp_path, file):
    path = copy_without_weights(checkpoint, tmp_path / "bad")
    config = json.loads((path / file).read_text())
    config["eos_token_id"] = [1, 99999]
    (path / file).write_text(json.dumps(config))
    for args in (["generate", TEXT], ["serve", "--port", str(free_port())]):
        line = one_line_exit_2(cli(path, *args))
        assert str(path / file) in line and "99999" in line, line


def test_chat_template_that_fails_is_refused_before_the_engine_starts(checkpoint, tmp_path):
    path = copy_without_weights(checkpoint, tmp_path / "bad")  # no weights: nothing may load
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('a system message is required') }}"
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    line = one_line_exit_2(cli(path, "serve", "--port", str(free_port())))
    assert "tokenizer_config.json's chat_template fails to render" in line
    assert "a system message is required" in line


# What transformers' template environment has beyond plain Jinja: tojson unescaped (and
# with indent), loop controls, strftime_now and the {% generation %} tag.
ENVIRONMENT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}{% break %}{% endif %}"
    "{% generation %}{{ m | tojson }}{% endgeneration %}\n{% endfor %}"
    "{{ {'é': '<b>&'} | tojson(indent=2) }}{{ strftime_now('%Y') | length }}"
)


def test_template_environment_is_transformers(checkpoint: Checkpoint, tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "'<café>' & \"x\""},
        {"role": "assistant", "content": "ok", "name": "bot"},
        {"role": "tool", "content": "never rendered"},
    ]
    theirs = checkpoint.hf_tokenizer.apply_chat_template(
        messages, chat_template=ENVIRONMENT_TEMPLATE, tokenize=False
    )
    path = copy_without_weights(checkpoint, tmp_path / "jinja")
    (path / "chat_template.jinja").write_text(ENVIRONMENT_TEMPLATE)  # before tokenizer_config's
    template = ChatTemplate.for_model(path)
    assert template.origin == str(path / "chat_template.jinja")
    assert template.render([ChatMessage(**m) for m in messages]) == theirs


@pytest.mark.parametrize("path", [default_model_path(), default_draft_path(), default_moe_path()])
def test_shipped_prompt_ids_are_transformers(path: Path) -> None:
    # The shipped tokenizer.json prepends <|bos|> itself, as the models were trained: text
    # gives transformers (and vLLM) the ids it gives us, BOS included.
    theirs = transformers.AutoTokenizer.from_pretrained(path)
    ours = Tokenizer.from_dir(path)
    for text in TEXTS:
        assert ours.encode(text) == theirs(text).input_ids, text
        assert ours.encode(text)[:1] == [ours.bos_id] == [0]
