"""/v1/completions and /v1/chat/completions: request -> engine -> JSON or server-sent events.

Both endpoints share one path: validate, tokenize, check the request can ever fit, add it
to the engine (admission answers at once: 429 over a tenant's limit, 400 if never
servable), then either collect the output or stream it as OpenAI's SSE chunks ending in
``data: [DONE]``. Usage counts are the engine's tokens: prompt tokens as tokenized, and
every generated token, the one that completed a stop string included (vLLM counts the same).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from claimbench.engine.outputs import TokenEvent
from claimbench.engine.sampling_params import SamplingParams
from claimbench.serving.api import sse
from claimbench.serving.api.errors import ApiError
from claimbench.serving.api.event_stream import EventStream, Write
from claimbench.serving.api.generation import OutputAssembler, Piece, pieces
from claimbench.serving.api.limits import cannot_fit, encode
from claimbench.serving.api.protocol import (
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatLogprobs,
    ChatResponseMessage,
    ChatStreamChoice,
    ChatTokenLogprob,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    Usage,
    error_body,
)
from claimbench.serving.api.sse import TextChunkTemplate
from claimbench.serving.api.state import ServerState
from claimbench.serving.engine_loop.protocol import EngineStopped, RequestFailed, RequestRejected
from claimbench.serving.engine_loop.request_stream import RequestStream

RETRY_AFTER_S = 1  # over a tenant's queue limit: it frees up within seconds
# A text-only piece carrying the template mark: the chunk the SSE templates are made from.
_MARKED = Piece(TextChunkTemplate.mark(), [], [], None)


class Job:
    """One admitted request: its pieces, and the counts its usage reports."""

    def __init__(
        self,
        state: ServerState,
        stream: RequestStream,
        assembler: OutputAssembler,
        num_prompt: int,
    ) -> None:
        self.state = state
        self.stream = stream
        self.assembler = assembler
        self.num_prompt_tokens = num_prompt

    @property
    def token_ids(self) -> list[int]:
        return self.assembler.token_ids

    @property
    def logprobs(self) -> list[float]:
        return self.assembler.logprobs

    def pieces(self) -> AsyncIterator[Piece]:
        return pieces(self.state.engine, self.stream, self.assembler)

    def usage(self) -> Usage:
        n = len(self.token_ids)
        return Usage(
            prompt_tokens=self.num_prompt_tokens,
            completion_tokens=n,
            total_tokens=self.num_prompt_tokens + n,
        )


async def completions(
    state: ServerState, tenant: str, body: CompletionRequest, http: Request
) -> Response:
    prompt = body.single_prompt()
    prompt_ids = await _tokenize(state, prompt) if isinstance(prompt, str) else list(prompt)
    job = await _admit(state, tenant, body, prompt_ids, body.max_tokens, body.logprobs is not None)
    request_id = f"cmpl-{uuid.uuid4().hex}"
    want_logprobs = body.logprobs is not None

    sent_chars = 0  # text offset of the next streamed token

    def chunk(piece: Piece) -> BaseModel:
        nonlocal sent_chars
        logprobs = None
        if want_logprobs:
            logprobs = _completion_logprobs(state, piece, sent_chars)
            sent_chars += sum(len(t) for t in logprobs.tokens)
        return CompletionResponse(
            id=request_id,
            created=state.created,
            model=state.model_name,
            choices=[
                CompletionChoice(
                    text=piece.text,
                    logprobs=logprobs,
                    finish_reason=piece.finish_reason,
                )
            ],
        )

    if body.stream:
        usage_chunk = CompletionResponse(
            id=request_id, created=state.created, model=state.model_name, choices=[]
        )
        template = None if want_logprobs else TextChunkTemplate(chunk(_MARKED))
        return _sse(job, chunk, usage_chunk if _include_usage(body) else None, None, template)

    async def respond() -> JSONResponse:
        text, reason = await _collect(job)
        whole = Piece(text, job.token_ids, job.logprobs, reason)
        response = CompletionResponse(
            id=request_id,
            created=state.created,
            model=state.model_name,
            choices=[
                CompletionChoice(
                    text=text,
                    logprobs=_completion_logprobs(state, whole, 0) if want_logprobs else None,
                    finish_reason=reason,
                )
            ],
            usage=job.usage(),
        )
        return JSONResponse(response.model_dump())

    return await _unless_disconnected(http, job, respond)


async def chat_completions(
    state: ServerState, tenant: str, body: ChatCompletionRequest, http: Request
) -> Response:
    # Jinja and the tokenizer are Python work that grows with the messages: on a worker
    # thread, so the loop keeps streaming to everyone else meanwhile (body_bounds.py).
    prompt_ids = await asyncio.to_thread(chat_prompt_ids, state, body)
    job = await _admit(state, tenant, body, prompt_ids, body.output_limit(), body.logprobs)
    request_id = f"chatcmpl-{uuid.uuid4().hex}"

    def chunk(piece: Piece) -> BaseModel:
        return ChatCompletionChunk(
            id=request_id,
            created=state.created,
            model=state.model_name,
            choices=[
                ChatStreamChoice(
                    delta=ChatDelta(content=piece.text) if piece.text else ChatDelta(),
                    logprobs=_chat_logprobs(state, piece) if body.logprobs else None,
                    finish_reason=piece.finish_reason,
                )
            ],
        )

    if body.stream:
        first = ChatCompletionChunk(
            id=request_id,
            created=state.created,
            model=state.model_name,
            choices=[ChatStreamChoice(delta=ChatDelta(role="assistant", content=""))],
        )
        usage_chunk = ChatCompletionChunk(
            id=request_id, created=state.created, model=state.model_name, choices=[]
        )
        template = None if body.logprobs else TextChunkTemplate(chunk(_MARKED))
        usage = usage_chunk if _include_usage(body) else None
        return _sse(job, chunk, usage, first, template)

    async def respond() -> JSONResponse:
        text, reason = await _collect(job)
        whole = Piece(text, job.token_ids, job.logprobs, reason)
        response = ChatCompletionResponse(
            id=request_id,
            created=state.created,
            model=state.model_name,
            choices=[
                ChatChoice(
                    message=ChatResponseMessage(content=text),
                    logprobs=_chat_logprobs(state, whole) if body.logprobs else None,
                    finish_reason=reason,
                )
            ],
            usage=job.usage(),
        )
        return JSONResponse(response.model_dump())

    return await _unless_disconnected(http, job, respond)


# -- shared steps -----------------------------------------------------------------------


def chat_prompt_ids(state: ServerState, body: ChatCompletionRequest) -> list[int]:
    """The chat's prompt ids (blocking: run on a worker thread). ValueError when the
    template fails, or writes more than could ever fit ``max_model_len`` (it stops there)."""
    template = state.chat_template
    max_chars = state.max_model_len * state.max_token_bytes  # a token covers >= 1 character
    text = template.render(body.messages, body.add_generation_prompt, max_chars=max_chars)
    reason = cannot_fit(text, state.max_token_bytes, state.max_model_len)
    if reason is not None:
        raise ValueError(reason)
    (ids,) = state.tokenizer.encode_batch([text])  # without Python's lock while it runs
    # A template that writes the BOS token itself must not get a second one.
    bos = template.bos_token
    if state.tokenizer.bos_id is not None and not (bos and text.startswith(bos)):
        return [state.tokenizer.bos_id, *ids]
    return ids


async def _tokenize(state: ServerState, text: str, add_bos: bool = True) -> list[int]:
    """The prompt's ids; 400 without tokenizing when the text is too long to ever fit."""
    reason = cannot_fit(text, state.max_token_bytes, state.max_model_len)
    if reason is not None:
        raise ApiError(400, reason, param="prompt")
    return await encode(state.tokenizer, text, add_bos)


async def _admit(
    state: ServerState,
    tenant: str,
    body: CompletionRequest | ChatCompletionRequest,
    prompt_ids: list[int],
    max_tokens: int | None,
    logprobs: bool,
) -> Job:
    limit = state.max_model_len
    if max_tokens is None:
        max_tokens = limit - len(prompt_ids)
        if max_tokens < 1:
            raise ApiError(
                400,
                f"the prompt has {len(prompt_ids)} tokens, leaving no room for output under "
                f"max_model_len={limit}",
            )
    if len(prompt_ids) + max_tokens > limit:
        raise ApiError(
            400,
            f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) = "
            f"{len(prompt_ids) + max_tokens} exceeds max_model_len={limit}",
            param="max_tokens",
        )
    bucket = state.tenants.bucket_size(tenant) if state.tenants is not None else None
    cost = len(prompt_ids) + max_tokens
    if bucket is not None and cost > bucket:
        # No wait makes it fit: a 429 would have clients retry it forever.
        raise ApiError(
            400,
            f"prompt + max_tokens = {cost} tokens can never fit tenant {tenant!r}'s token "
            f"bucket of {bucket:g} tokens (token_burst)",
            param="max_tokens",
        )
    try:
        sampling = SamplingParams(
            max_tokens=max_tokens,
            temperature=body.temperature,
            # Past the vocabulary means every token (vLLM's rule): clamped, so no value a
            # client sends can overflow the step's int32 array.
            top_k=min(max(body.top_k, 0), state.tokenizer.vocab_size),
            top_p=body.top_p,
            seed=body.seed,
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            logprobs=logprobs,
        )
        stream = await state.engine.add(
            prompt_ids,
            sampling,
            tenant=tenant,
            priority=body.priority,
            cache_salt=state.cache_salt(tenant, body.cache_salt),
        )
    except RequestRejected as e:
        if e.over_limit:
            wait = RETRY_AFTER_S if e.retry_after_s is None else math.ceil(e.retry_after_s)
            headers = {"Retry-After": str(max(RETRY_AFTER_S, wait))}
            raise ApiError(429, e.reason, headers=headers) from e
        raise ApiError(400, e.reason) from e
    except EngineStopped as e:
        reason = "the server is shutting down" if state.draining else "the engine is not running"
        raise ApiError(503, reason) from e
    except ValueError as e:
        raise ApiError(400, str(e)) from e
    return Job(
        state, stream, OutputAssembler(state.tokenizer, body.stop_strings()), len(prompt_ids)
    )


async def _collect(job: Job) -> tuple[str, str | None]:
    if not job.assembler.stop:
        # Nothing to act on before the end (no stop string to cut at): read the output
        # in one go when it is complete, not a wake-up per engine step.
        job.stream.wake_at_end()
    parts, reason = [], None
    try:
        async for piece in job.pieces():
            parts.append(piece.text)
            reason = piece.finish_reason
    except EngineStopped as e:
        raise ApiError(503, "the server stopped before the request finished") from e
    except RequestFailed as e:
        raise ApiError(400, str(e)) from e
    return "".join(parts), reason


async def _unless_disconnected(
    http: Request, job: Job, respond: Callable[[], Awaitable[JSONResponse]]
) -> JSONResponse:
    """``respond()``, cancelled (and the request aborted) if the client goes away first:
    nothing else notices a disconnect before a non-streamed response is written."""
    work = asyncio.ensure_future(respond())
    gone = asyncio.ensure_future(_disconnected(http))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            job.state.engine.abort(job.stream.request_id)  # frees its pages now
            work.cancel()
            await asyncio.wait({work})
    if work.cancelled():
        return JSONResponse(error_body("client disconnected", 499), status_code=499)
    return work.result()


async def _disconnected(http: Request) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass


def _include_usage(body: CompletionRequest | ChatCompletionRequest) -> bool:
    return body.stream_options is not None and body.stream_options.include_usage


def _sse(
    job: Job,
    chunk: Callable[[Piece], BaseModel],
    usage_chunk: BaseModel | None,
    first: BaseModel | None,
    template: TextChunkTemplate | None,
) -> EventStream:
    """The response's events; ``template`` (when given) writes the chunks that only carry
    text, the model of ``chunk`` every other one. A piece (what one wake-up of the request
    brings) is one write; the last piece's chunk, the usage chunk and ``[DONE]`` are one."""

    def middle(piece: Piece) -> str:
        """The event of a piece that does not end the stream."""
        if template is not None and piece.text:
            return template.event(piece.text)
        return sse.event(chunk(piece))

    async def produce(write: Write) -> None:
        if first is not None:
            await write(sse.event(first), False)
        if template is not None and not job.assembler.stop:
            job.stream.listener = functools.partial(_write_tokens, job, middle, write)
        tail = ""
        try:
            async for piece in job.pieces():
                if piece.finish_reason is not None:
                    tail = sse.event(chunk(piece))
                elif piece.text or piece.token_ids:
                    await write(middle(piece), False)
        except EngineStopped as e:  # the engine ended, or shutdown's grace period did
            tail += f"data: {json.dumps(error_body(str(e), 503))}\n\n"
        except RequestFailed as e:
            tail += f"data: {json.dumps(error_body(str(e), 400))}\n\n"
        finally:
            job.stream.listener = None
        if usage_chunk is not None:
            usage_chunk.usage = job.usage()
            tail += sse.event(usage_chunk)
        await write(tail + "data: [DONE]\n\n", True)

    return EventStream(produce)


def _write_tokens(
    job: Job, middle: Callable[[Piece], str], write: Write, events: Sequence[object]
) -> bool:
    """A stream's listener (``RequestStream.listener``): a step's tokens written as one
    chunk from the pipe reader's callback, the chunk ``_sse``'s loop would write for the
    same piece. Declines (False, nothing taken) anything but plain tokens, and whenever the
    chunk cannot go out at once (``BodyWriter.can_write_now``); set only for requests without
    stop strings or log-probs, so a token can never end the output here."""
    if not write.can_write_now() or not all(type(e) is TokenEvent for e in events):
        return False
    assembler = job.assembler
    text = "".join([assembler.push(e.token_id, e.logprob) for e in events])
    return write.write_now(middle(Piece(text, [e.token_id for e in events], [], None)))


def _completion_logprobs(state: ServerState, piece: Piece, offset: int) -> CompletionLogprobs:
    tokens = [state.tokenizer.decode([t], skip_special=False) for t in piece.token_ids]
    offsets, position = [], offset
    for token in tokens:
        offsets.append(position)
        position += len(token)
    return CompletionLogprobs(tokens=tokens, token_logprobs=piece.logprobs, text_offset=offsets)


def _chat_logprobs(state: ServerState, piece: Piece) -> ChatLogprobs:
    content = []
    for token_id, logprob in zip(piece.token_ids, piece.logprobs, strict=True):
        token = state.tokenizer.decode([token_id], skip_special=False)
        content.append(ChatTokenLogprob(token=token, logprob=logprob, bytes=list(token.encode())))
    return ChatLogprobs(content=content)
