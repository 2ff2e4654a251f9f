"""Small random checkpoints that transformers writes itself, each with tokenizer files that
follow one family's conventions, built here with the ``tokenizers`` library (nothing is
downloaded):

- llama3: byte-level BPE whose tokenizer.json post-processor prepends ``<|begin_of_text|>``
  (a ``TemplateProcessing``, as Llama 3's); config.json's ``eos_token_id`` a list of three
  (end of text, of a message, of a turn, as Llama-3.1-Instruct's); Llama 3.1's chat template.
- qwen2: byte-level BPE whose post-processor adds nothing; config.json names
  ``<|endoftext|>`` as ``bos_token_id`` all the same and only ``<|im_end|>`` as EOS, while
  generation_config.json lists ``[<|im_end|>, <|endoftext|>]`` (Qwen2.5-Instruct's); Qwen2.5's
  chat template with its default system prompt.

Both have a generation_config.json. Random weights never emit a special token, so the
writer relabels two output rows of the untied head: the token greedy decoding gives some
steps into the chat prompt's reply becomes the end-of-turn id, and the one some steps into
the text prompt's becomes an end id that only a full stop list holds. Swapping two rows of
lm_head renames which id the model predicts and changes nothing before that step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as HFTokenizer

from claimbench.workload.corpus import heldout_texts

TEXT = "def fibonacci(n):\n    "
CHATS = {
    "with system": [
        {"role": "system", "content": "You write short Python functions."},
        {"role": "user", "content": "def fibonacci(n): return the n-th number."},
    ],
    "no system": [{"role": "user", "content": "Sort a list of numbers in place."}],
}
CHAT = CHATS["with system"]  # the conversation the end-of-turn id is placed in
NUM_TOKENS = 16  # greedy tokens generated per prompt
STOP_STEP = 3  # earliest step of a reply whose token may become a stop id
MAX_SEEDS = 8

LLAMA31_TEMPLATE = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""  # noqa: E501 (Meta's template, kept as written)

QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""  # noqa: E501 (Qwen's template, its tool-call prose shortened)


@dataclass(frozen=True)
class Family:
    """One family's tokenizer conventions (token strings; ids come from the tokenizer)."""

    name: str
    specials: tuple[str, ...]  # added after the trained vocabulary, as real checkpoints do
    bos: str  # config.json's bos_token_id
    adds_bos: bool  # the tokenizer's post-processor prepends ``bos``
    config_eos: tuple[str, ...]  # config.json's eos_token_id (one: written as an int)
    generation_eos: tuple[str, ...]  # generation_config.json's eos_token_id
    tokenizer_eos: str  # tokenizer_config.json's eos_token
    chat_stop: str  # the id the chat reply is made to end with
    text_stop: str  # the id the text reply is made to end with
    template: str
    split_pattern: str  # the pre-tokenizer's regex
    normalizer: normalizers.Normalizer | None = None


# Llama 3's digits split in threes; Qwen2's one by one (transformers' Qwen2Tokenizer sets
# its own pre-tokenizer and NFC, so the tokenizer.json must say the same).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


LLAMA3 = Family(
    name="llama3",
    specials=(
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eom_id|>",
        "<|eot_id|>",
    ),
    bos="<|begin_of_text|>",
    adds_bos=True,
    config_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
    generation_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
    tokenizer_eos="<|eot_id|>",
    chat_stop="<|eot_id|>",  # the last of config.json's list
    text_stop="<|eom_id|>",
    template=LLAMA31_TEMPLATE,
    split_pattern=LLAMA3_SPLIT,
)
QWEN2 = Family(
    name="qwen2",
    specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    bos="<|endoftext|>",
    adds_bos=False,
    config_eos=("<|im_end|>",),
    generation_eos=("<|im_end|>", "<|endoftext|>"),
    tokenizer_eos="<|im_end|>",
    chat_stop="<|im_end|>",
    text_stop="<|endoftext|>",  # only generation_config.json lists it
    template=QWEN25_TEMPLATE,
    split_pattern=QWEN2_SPLIT,
    normalizer=normalizers.NFC(),
)


def build_tokenizer(family: Family) -> HFTokenizer:
    """Byte-level BPE trained on held-out Python source, the family's special tokens added
    after it and its post-processor."""
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.normalizer = family.normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(family.split_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(heldout_texts()[:200], trainer=trainer)
    tokenizer.add_special_tokens(list(family.specials))
    byte_level = processors.ByteLevel(trim_offsets=False)
    if family.adds_bos:
        bos = (family.bos, tokenizer.token_to_id(family.bos))
        template = processors.TemplateProcessing(
            single=f"{family.bos} $A",
            pair=f"{family.bos} $A {family.bos} $B:1",
            special_tokens=[bos],
        )
        tokenizer.post_processor = processors.Sequence([byte_level, template])
    else:
        tokenizer.post_processor = byte_level
    return tokenizer


def _ids(tokenizer: HFTokenizer, tokens: tuple[str, ...]) -> list[int]:
    return [tokenizer.token_to_id(t) for t in tokens]


def _hf_model(
    arch: str, family: Family, tokenizer: HFTokenizer, seed: int
) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    eos = _ids(tokenizer, family.config_eos)
    common = dict(
        vocab_size=-(-tokenizer.get_vocab_size() // 64) * 64,  # padded, as real vocabularies
        # head_dim 32: the smallest vLLM's CPU attention takes (the vLLM comparison runs these).
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.1,  # peakier random logits: greedy argmax far from ties
        tie_word_embeddings=False,
        bos_token_id=tokenizer.token_to_id(family.bos),
        eos_token_id=eos if len(eos) > 1 else eos[0],
    )
    if arch == "llama":
        config = transformers.LlamaConfig(**common, intermediate_size=96, rope_theta=500000.0)
        return transformers.LlamaForCausalLM(config)
    if arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(
            transformers.Qwen2Config(**common, intermediate_size=96, rope_theta=1e6)
        )
        with torch.no_grad():  # transformers zero-initialises biases; make them matter
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.1)  # larger ones collapse attention: one token repeated
        return model
    config = transformers.MixtralConfig(
        **common, intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, rope_theta=1e6
    )
    return transformers.MixtralForCausalLM(config)


def hf_greedy(model: transformers.PreTrainedModel, prompt: list[int], num_tokens: int) -> list[int]:
    """Forward, argmax, append: greedy without stop ids."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(num_tokens):
            logits = model(torch.as_tensor([ids], dtype=torch.long)).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt) :]


def chat_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    """transformers' ``apply_chat_template`` token ids (a list or an encoding by version)."""
    out = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def _make_stop(model, prompt: list[int], stop_id: int, specials: set[int]) -> bool:
    """Swap lm_head rows so greedy decoding of ``prompt`` emits ``stop_id`` at the first step
    from STOP_STEP whose token is new to the reply, before any special token; False if no
    step qualifies."""
    reply = hf_greedy(model, prompt, NUM_TOKENS)
    limit = next((i for i, t in enumerate(reply) if t in specials), NUM_TOKENS)
    step = next((i for i in range(STOP_STEP, limit) if reply[i] not in reply[:i]), None)
    if step is None:
        return False
    rows = model.lm_head.weight
    with torch.no_grad():
        rows[[reply[step], stop_id]] = rows[[stop_id, reply[step]]]
    return True


def write_checkpoint(path: Path, arch: str, family: Family) -> Path:
    """The checkpoint: tokenizer files, then the model transformers saves, its head
    relabelled so the chat and text replies end on the family's stop ids."""
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(family)
    tokenizer.save(str(path / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": family.bos if family.adds_bos else None,
        "eos_token": family.tokenizer_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 512,
        "chat_template": family.template,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    stops = [tokenizer.token_to_id(family.chat_stop), tokenizer.token_to_id(family.text_stop)]
    specials = set(_ids(tokenizer, family.specials))
    for seed in range(MAX_SEEDS):
        model = _hf_model(arch, family, tokenizer, seed).eval()
        model.generation_config = transformers.GenerationConfig(
            bos_token_id=tokenizer.token_to_id(family.bos),
            eos_token_id=_ids(tokenizer, family.generation_eos),
        )
        model.save_pretrained(path)  # first, so AutoTokenizer sees the model type, as users do
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(path)
        with torch.no_grad():  # as in a trained model: special and padding ids never win
            unused = [*specials, *range(tokenizer.get_vocab_size(), model.config.vocab_size)]
            model.lm_head.weight[unused] = 0.0
        prompts = [chat_ids(hf_tokenizer, CHAT), hf_tokenizer(TEXT).input_ids]
        # A seed whose reply repeats one or two tokens has no new token to relabel: next one.
        if all(
            _make_stop(model, p, stop, specials) for p, stop in zip(prompts, stops, strict=True)
        ):
            break
    else:
        raise RuntimeError(f"no seed below {MAX_SEEDS} gives replies with a token to relabel")
    model.save_pretrained(path)
    return path
