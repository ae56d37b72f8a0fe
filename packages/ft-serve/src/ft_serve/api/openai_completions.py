"""POST /v1/completions: OpenAI (legacy) Completions over a raw prompt, no chat template.

``prompt``: a string, an array of token ids, or an array of one of those (one choice each)."""

from __future__ import annotations

import asyncio
import time
import uuid

from ft_serve.api.fields import field
from ft_serve.api.openai_chat import check_room, common_checks, sampling
from ft_serve.api.sse import run_to_end, sse_data, stream
from ft_serve.parsers import collect
from ft_serve.server.errors import ApiError, bad_request, openai_body
from ft_serve.server.service import check_api_error

_FAILED = object()  # queued after the error event of a prompt that failed


def _prompts(svc, body: dict) -> list[list[int]]:
    p = body.get("prompt")
    tok = svc.engine.tokenizer
    vocab = svc.engine.model_config.vocab_size

    def one(x, path):
        if isinstance(x, str):
            ids = tok.encode(x)
        elif isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x):
            bad = [i for i in x if not 0 <= i < vocab]
            if bad:
                raise bad_request(
                    f"'{path}' holds token id {bad[0]}, outside the vocabulary [0, {vocab})", path
                )
            ids = list(x)
        else:
            raise bad_request(f"'{path}' must be a string or an array of token ids", path)
        if not ids:
            raise bad_request(f"'{path}' is empty", path)
        return ids

    if p is None:
        raise bad_request("'prompt' is required", "prompt")
    if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
        most = svc.config.max_waiting_requests  # a larger batch could never be queued whole
        if len(p) > most:
            raise bad_request(
                f"'prompt' holds {len(p)} prompts; at most {most} fit in one request "
                "(--max-waiting-requests)",
                "prompt",
                "too_many_prompts",
            )
        return [one(x, f"prompt[{i}]") for i, x in enumerate(p)]
    return [one(p, "prompt")]


async def completions(app, request, body: dict):
    svc = app.state.service
    common_checks(body, svc.engine.model_config.vocab_size)
    if body.get("suffix"):
        raise bad_request("'suffix' (insertion) is not supported by this server", "suffix")
    if body.get("best_of") not in (None, 1):
        raise bad_request("'best_of' > 1 is not supported by this server", "best_of")
    model = field(body, "model", str, required=True)  # any name is served (README: Serving)
    params = sampling(body, ("max_tokens",), 16, svc.max_model_len)
    echo = field(body, "echo", bool, False)
    prompts = await asyncio.to_thread(_prompts, svc, body)  # encoding: off the event loop
    gens = [svc.start_completion(ids, params) for ids in prompts]
    for g in gens:
        check_room(g, body, ("max_tokens",), svc.max_model_len)
    rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    tok = svc.engine.tokenizer
    if field(body, "stream", bool, False):
        usage = bool((field(body, "stream_options", dict, {}) or {}).get("include_usage"))
        return stream(_stream(gens, rid, created, model, usage, echo, tok))
    tasks = [asyncio.create_task(run_to_end(g, request)) for g in gens]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:  # one prompt failed (e.g. the queue filled up): stop all the others too
        _abort(gens, tasks)
        await asyncio.gather(*tasks, return_exceptions=True)
        _abort(gens, [])  # any that its (uncancelled) inner consumer submitted meanwhile
        raise
    for g in gens:
        check_api_error(g)
    choices = []
    for i, (g, evs) in enumerate(zip(gens, results)):
        text = (tok.decode(g.prompt_ids) if echo else "") + collect(evs).content
        choices.append(
            {
                "index": i,
                "text": text,
                "logprobs": None,
                "finish_reason": "length" if g.finish_reason == "length" else "stop",
            }
        )
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": _usage(gens),
    }


def _abort(gens, tasks) -> None:
    """Stop every prompt of a batch: cancel their tasks and abort the engine requests submitted."""
    for t in tasks:
        t.cancel()
    for g in gens:
        g.cancel()


def _usage(gens) -> dict:
    p, c = sum(g.prompt_tokens for g in gens), sum(g.completion_tokens for g in gens)
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": sum(g.cached_tokens for g in gens)},
    }


async def _stream(gens, rid, created, model, include_usage, echo, tok):
    def chunk(i, text, finish=None):
        return sse_data(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [{"index": i, "text": text, "logprobs": None, "finish_reason": finish}],
            }
        )

    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i, g):
        try:
            async for ev in g:
                if ev.kind == "content" and ev.text:
                    await queue.put(chunk(i, ev.text))
            check_api_error(g)  # an engine failure (or the shutdown deadline): the error event
            await queue.put(chunk(i, "", "length" if g.finish_reason == "length" else "stop"))
        except Exception as e:  # e.g. the queue filled up: the stream ends with an error event
            err = (
                e
                if isinstance(e, ApiError)
                else ApiError(500, f"generation failed: {type(e).__name__}")
            )
            await queue.put(sse_data(openai_body(err)))
            await queue.put(_FAILED)
        finally:
            await queue.put(None)

    for i, g in enumerate(gens):
        if echo:
            yield chunk(i, tok.decode(g.prompt_ids))
    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(gens)]
    try:
        left = len(tasks)
        while left:
            item = await queue.get()
            if item is _FAILED:
                break
            if item is None:
                left -= 1
            else:
                yield item
    finally:  # a failure or a client gone: the other prompts stop (their pumps abort them)
        _abort(gens, tasks)
    if item is _FAILED:
        yield "data: [DONE]\n\n"
        return
    if include_usage:
        yield sse_data(
            {
                "id": rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage(gens),
            }
        )
    yield "data: [DONE]\n\n"
