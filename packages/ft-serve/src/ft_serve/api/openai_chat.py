"""POST /v1/chat/completions: OpenAI Chat Completions, streamed and not (DESIGN §6: OpenCode, OpenClaw).

Accepted beyond the basics: tools / tool_choice (auto, none, required, named) / parallel_tool_calls,
reasoning_content (or reasoning) on assistant messages, max_tokens or max_completion_tokens, stop, seed,
n=1, stream_options.include_usage, response_format text|json_object|json_schema (enforced by constrained
decoding), reasoning_effort,
chat_template_kwargs (e.g. {"enable_thinking": false}), top_k / min_p / repetition_penalty.
"""

from __future__ import annotations

import re
import time
import uuid

from ft_core import SamplingParams
from ft_core.errors import RequestError

from ft_serve.api.fields import (
    INT64,
    choice,
    field,
    logit_bias,
    name_of,
    number,
    stop_list,
)
from ft_serve.api.openai_chat_input import convert_messages, convert_tools, tool_choice_of
from ft_serve.api.sse import run_to_end, sse_data, stream
from ft_serve.parsers import collect
from ft_serve.server.errors import bad_request
from ft_serve.server.service import ChatRequest, check_api_error

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # OpenAI's reasoning efforts
# names the server gives the chat template itself (service.render, tokenizer.apply_chat_template)
_RESERVED_KWARGS = ("messages", "tools", "add_generation_prompt", "source")


def sampling(
    body: dict, max_key: tuple[str, ...], default_max: int, limit: int | None = None
) -> SamplingParams:
    """The SamplingParams of an OpenAI request; ``limit``: the context length no ``max_key`` may pass."""
    mx = None
    for k in max_key:
        v = number(body, k, None, 1, integer=True)
        if v is not None and limit is not None and v > limit:
            raise bad_request(
                f"'{k}' is {v}, more than this model's context length ({limit} tokens, "
                "the prompt included)",
                k,
            )
        mx = v if mx is None else mx
    try:
        return SamplingParams(
            max_tokens=mx or default_max,
            temperature=number(body, "temperature", 1.0, 0, 2),
            top_p=number(body, "top_p", 1.0, 0, 1) or 1e-9,
            top_k=number(body, "top_k", 0, -1, integer=True),
            min_p=number(body, "min_p", 0.0, 0, 1),
            presence_penalty=number(body, "presence_penalty", 0.0, -2, 2),
            frequency_penalty=number(body, "frequency_penalty", 0.0, -2, 2),
            repetition_penalty=number(body, "repetition_penalty", 1.0, 0),
            seed=number(body, "seed", None, *INT64, integer=True),
            stop=stop_list(body, "stop", 4),
            ignore_eos=bool(field(body, "ignore_eos", bool, False)),
            min_tokens=number(body, "min_tokens", 0, 0, integer=True),
        )
    except RequestError as e:  # a combination SamplingParams refuses (it names the field)
        raise sampling_error(e) from None


def sampling_error(e: RequestError):
    """The 400 of a SamplingParams refusal ("sampling parameter NAME=... must ..."), naming NAME."""
    m = re.match(r"sampling parameter (\w+)=", str(e))
    return bad_request(str(e), m.group(1) if m else None)


def response_schema(body: dict) -> dict | None:
    """The JSON schema ``response_format`` asks for ({} = any JSON object), or None for text."""
    rf = field(body, "response_format", dict, None)
    kind = (
        choice(
            rf, "type", ("text", "json_object", "json_schema"), "text", path="response_format.type"
        )
        if rf
        else "text"
    )
    if kind == "json_schema":
        js = field(rf, "json_schema", dict, required=True, path="response_format.json_schema")
        name_of(js, "name", "response_format.json_schema.name")
        return field(js, "schema", dict, {}, path="response_format.json_schema.schema")
    return {} if kind == "json_object" else None


def common_checks(body: dict, vocab_size: int) -> None:
    """The checks Chat Completions and Completions share (n, logprobs, logit_bias, streaming)."""
    if number(body, "n", 1, 1, integer=True) != 1:
        raise bad_request("'n' > 1 is not supported; send one request per completion", "n")
    if field(body, "logprobs", (bool, int), False):
        raise bad_request("'logprobs' is not supported by this server", "logprobs")
    logit_bias(body, vocab_size)
    if field(body, "stream_options", dict, None) is not None and not field(
        body, "stream", bool, False
    ):
        raise bad_request(
            "'stream_options' is only allowed when 'stream' is true", "stream_options"
        )


def template_kwargs(body: dict) -> dict:
    """``chat_template_kwargs``: extra template variables, none of the names the server sets itself."""
    kw = dict(field(body, "chat_template_kwargs", dict, {}) or {})
    for k in kw:
        if k in _RESERVED_KWARGS or k.endswith("_token"):
            p = f"chat_template_kwargs.{k}"
            raise bad_request(
                f"'{p}' cannot be set: the server passes {k!r} to the template itself", p
            )
    return kw


def check_room(gen, body: dict, keys: tuple[str, ...], context: int) -> None:
    """400 when the prompt of ``gen`` plus the output limit the client named passes ``context``
    (nothing was submitted yet: the Generation starts on first iteration)."""
    for k in keys:
        if (v := body.get(k)) is not None and gen.prompt_tokens + v > context:
            raise bad_request(
                f"'{k}' is {v}, but the prompt has {gen.prompt_tokens} tokens and this model's "
                f"context length is {context}: at most {context - gen.prompt_tokens} output "
                "tokens fit",
                k,
                "context_length_exceeded",
            )


async def chat_completions(app, request, body: dict):
    svc = app.state.service
    common_checks(body, svc.engine.model_config.vocab_size)
    if number(body, "top_logprobs", None, 0, 20, integer=True) is not None and not body.get(
        "logprobs"
    ):
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    model = field(body, "model", str, required=True)  # any name is served (README: Serving)
    kwargs = template_kwargs(body)
    if (effort := choice(body, "reasoning_effort", EFFORTS, None)) is not None:
        kwargs.setdefault("reasoning_effort", effort)
    thinking = kwargs.pop("enable_thinking", None)
    if effort == "none" and thinking is None:
        thinking = False
    max_keys = ("max_completion_tokens", "max_tokens")
    req = ChatRequest(
        convert_messages(body.get("messages")),
        sampling(body, max_keys, svc.default_max_tokens, svc.max_model_len),
        convert_tools(body.get("tools")),
        tool_choice_of(body),
        thinking,
        kwargs,
    )
    parallel = field(body, "parallel_tool_calls", bool, True)
    req.json_schema, req.parallel_tool_calls = response_schema(body), parallel
    gen = await svc.start_chat(req)
    check_room(gen, body, max_keys, svc.max_model_len)
    rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if field(body, "stream", bool, False):
        usage = bool((field(body, "stream_options", dict, {}) or {}).get("include_usage"))
        return stream(_stream(gen, rid, created, model, usage, parallel))
    events = await run_to_end(gen, request)
    check_api_error(gen)
    calls = gen.tool_calls if parallel else gen.tool_calls[:1]
    out = collect(events)
    msg = {"role": "assistant", "content": out.content or (None if calls else "")}
    if out.reasoning:
        msg["reasoning_content"] = out.reasoning
    if calls:
        msg["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": finish_reason(gen, calls),
            }
        ],
        "usage": usage_of(gen),
    }


def finish_reason(gen, calls) -> str:
    if calls:
        return "tool_calls"
    return "length" if gen.finish_reason == "length" else "stop"


def usage_of(gen) -> dict:
    return {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.completion_tokens,
        "total_tokens": gen.prompt_tokens + gen.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": gen.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": gen.reasoning_tokens},
    }


async def _stream(gen, rid: str, created: int, model: str, include_usage: bool, parallel: bool):
    def chunk(delta: dict, finish=None) -> str:
        return sse_data(
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    yield chunk({"role": "assistant", "content": ""})
    async for ev in gen:
        if ev.kind == "content" and ev.text:
            yield chunk({"content": ev.text})
        elif ev.kind == "reasoning" and ev.text:
            yield chunk({"reasoning_content": ev.text})
        elif ev.kind == "tool_call" and (parallel or ev.index == 0):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": ev.index,
                            "id": ev.id,
                            "type": "function",
                            "function": {"name": ev.name, "arguments": ""},
                        }
                    ]
                }
            )
        elif ev.kind == "tool_args" and (parallel or ev.index == 0) and ev.text:
            yield chunk({"tool_calls": [{"index": ev.index, "function": {"arguments": ev.text}}]})
    if gen.finish_reason == "error":
        yield sse_data(
            {
                "error": {
                    "message": gen.error or "generation failed",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
        )
    else:
        calls = gen.tool_calls if parallel else gen.tool_calls[:1]
        yield chunk({}, finish_reason(gen, calls))
    if include_usage:
        yield sse_data(
            {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage_of(gen),
            }
        )
    yield "data: [DONE]\n\n"
