"""OpenAI-compatible request and response schemas (pydantic), as vLLM's server speaks them.

Requests are validated strictly: a JSON string is not a number and 2.5 is not a token
count, and an unknown field is an error (a misspelt ``max_token`` must not be silently
ignored). Fields OpenAI defines that this engine cannot honour (n > 1, echo, penalties,
logit_bias, top-logprob alternatives) are accepted only at their neutral values, and
anything else is refused by ``unsupported()`` with a message naming the field.

vLLM's extensions are accepted too: ``top_k``, ``ignore_eos``, ``stop_token_ids``,
``cache_salt`` (prefix-cache isolation, see app.py) and ``priority`` (a tier, capped at
the tenant's own).

Every integer that reaches a device array is bounded here, where it enters (and again by
the engine's SamplingParams): token ids, stop ids, top_k and priority fit an int32, a seed
a uint32 (a value past them once overflowed the step's arrays and ended the engine).
``top_k`` above the vocabulary means "every token", as vLLM treats it. At most
MAX_STOP_STRINGS stop strings of MAX_STOP_CHARS characters (OpenAI's limit is 4): each is
searched for after every token. A chat has at most MAX_MESSAGES messages and
MAX_CONTENT_PARTS content parts (body_bounds.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from claimbench.serving.api.body_bounds import MAX_CONTENT_PARTS, MAX_MESSAGES

INT32_MAX = 2**31 - 1
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
Int32 = Annotated[int, Field(ge=0, le=INT32_MAX)]  # a token id, a tier: what an i32 holds


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class StreamOptions(_Strict):
    include_usage: bool = False  # one last chunk with the usage, before [DONE]


class _SamplingFields(_Strict):
    """Fields both endpoints share."""

    model: str
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=-1)] = 0  # vLLM: 0 or -1 = all tokens; clamped to the vocab
    stop: str | list[str] | None = None  # bounded in unsupported(): a clearer message
    stop_token_ids: list[Int32] | None = None
    seed: Annotated[int, Field(ge=0, lt=2**32)] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None  # accepted and ignored, as OpenAI's own server does for routing
    ignore_eos: bool = False
    cache_salt: Annotated[str, Field(min_length=1)] | None = None
    priority: Int32 = 0

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    def unsupported(self) -> str | None:
        """Why a field asks for something this server does not do, or None."""
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        if len(stops) > MAX_STOP_STRINGS:
            return f"stop: at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}"
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            return f"stop: a stop string has at most {MAX_STOP_CHARS} characters"
        if len(self.stop_token_ids or ()) > MAX_STOP_TOKEN_IDS:
            return f"stop_token_ids: at most {MAX_STOP_TOKEN_IDS}, got {len(self.stop_token_ids)}"
        if self.n != 1:
            return f"n={self.n}: only n=1 is supported"
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty and frequency_penalty are not supported (use 0)"
        if self.logit_bias:
            return "logit_bias is not supported"
        if self.stream_options is not None and not self.stream:
            return "stream_options is only allowed with stream=true"
        return None


class CompletionRequest(_SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]  # ids bounded in unsupported()
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = 16  # OpenAI's default
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    def unsupported(self) -> str | None:
        if self.echo:
            return "echo is not supported"
        if self.best_of not in (None, 1):
            return f"best_of={self.best_of}: only 1 is supported"
        if self.suffix:
            return "suffix is not supported"
        if self.logprobs:
            return (
                f"logprobs={self.logprobs}: only 0 is supported (the sampled token's "
                f"log-prob, without alternatives)"
            )
        batch = (
            isinstance(self.prompt, list) and self.prompt and not isinstance(self.prompt[0], int)
        )
        if batch and len(self.prompt) != 1:
            return f"one prompt per request, got {len(self.prompt)}"
        prompt = self.single_prompt()
        if isinstance(prompt, list) and any(not 0 <= t <= INT32_MAX for t in prompt):
            return f"prompt: token ids must be in [0, {INT32_MAX}]"
        return super().unsupported()

    def single_prompt(self) -> str | list[int]:
        """The prompt as text or token ids (a one-element batch unwrapped)."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            return prompt[0]
        return prompt


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    # Lenient on extra keys: clients send back assistant messages with refusal, tool_calls...
    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(_SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None  # None = to max_model_len
    max_completion_tokens: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None  # OpenAI's bound
    add_generation_prompt: bool = True

    def unsupported(self) -> str | None:
        num_parts = sum(len(m.content) for m in self.messages if isinstance(m.content, list))
        if num_parts > MAX_CONTENT_PARTS:
            return f"messages: at most {MAX_CONTENT_PARTS} content parts in all, got {num_parts}"
        if self.top_logprobs:
            return f"top_logprobs={self.top_logprobs}: only 0 is supported"
        if self.top_logprobs is not None and not self.logprobs:
            return "top_logprobs needs logprobs=true"
        return super().unsupported()

    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


# -- responses --------------------------------------------------------------------------


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[dict] = []


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatStreamChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatStreamChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "claimbench"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    """OpenAI's error JSON: what every refusal and failure of the API sends."""

    error: ErrorDetail


def error_body(message: str, status: int, param: str | None = None) -> dict:
    """OpenAI's error JSON."""
    kind = {
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        503: "service_unavailable",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}
