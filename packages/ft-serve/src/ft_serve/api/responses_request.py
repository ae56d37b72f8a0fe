"""The request side of POST /v1/responses (and /v1/responses/compact): the body checked field by
field and turned into a ChatRequest plus what the response echoes and how its output is built
(``parse``); ``tool_choice`` and ``text.format`` read. Refusals are 400s naming the field."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ft_serve.api.fields import choice, field, name_of, number
from ft_serve.api.openai_chat import EFFORTS, sampling
from ft_serve.api.responses_items import convert_input
from ft_serve.api.responses_tools import ToolMap, build_tools, flat_name
from ft_serve.server.errors import bad_request
from ft_serve.server.service import ChatRequest


COMPACT_MAX_TOKENS = 4096
# the values of ``include`` (openai-python ``ResponseIncludable``)
INCLUDABLE = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
COMPACT_PROMPT = (
    "Context compaction: the conversation above will be replaced by a summary so that the work can continue in a "
    "fresh context window. Write that summary now for whoever continues the task: the user's goals, requirements "
    "and preferences; the state of the work (files created or changed, commands run and what they showed, decisions "
    "and their reasons); open problems; and the concrete next steps. Be specific (paths, names, values) and brief. "
    "Reply with the summary only and do not call tools."
)
_REFUSED = {
    "previous_response_id": "this server stores no responses; send the whole conversation in 'input'",
    "conversation": "this server stores no conversations; send the whole conversation in 'input'",
    "prompt": "stored prompt templates are not supported; send 'instructions' and 'input'",
}


@dataclass
class Parsed:
    chat: ChatRequest
    tools: ToolMap
    echo: dict  # request fields echoed in the response object
    stream: bool
    builder_opts: dict
    compaction: bool


def parse(svc, body: dict, *, compaction: bool = False) -> Parsed:
    for key, why in _REFUSED.items():
        if body.get(key) is not None:
            raise bad_request(f"'{key}' is not supported: {why}", key)
    if field(body, "background", bool, False):
        raise bad_request("'background' responses are not supported; stream instead", "background")
    items = body.get("input")
    if (
        isinstance(items, list)
        and items
        and isinstance(items[-1], dict)
        and items[-1].get("type") == "compaction_trigger"
    ):
        compaction, body = True, {**body, "input": items[:-1]}
    tools = build_tools(body.get("tools"))
    tc = tool_choice_of(body.get("tool_choice"))
    reasoning = field(body, "reasoning", dict, {}) or {}
    effort = choice(reasoning, "effort", EFFORTS, None, "reasoning.effort")
    summary = choice(
        reasoning, "summary", ("auto", "concise", "detailed", "none"), None, "reasoning.summary"
    ) or choice(
        reasoning,
        "generate_summary",
        ("auto", "concise", "detailed", "none"),
        None,
        "reasoning.generate_summary",
    )
    include = field(body, "include", list, []) or []
    for i, v in enumerate(include):
        if v not in INCLUDABLE:
            raise bad_request(
                f"'include[{i}]' must be one of {', '.join(INCLUDABLE)}, got {v!r}", f"include[{i}]"
            )
    metadata = field(body, "metadata", dict, {}) or {}
    text = field(body, "text", dict, {}) or {}
    fmt = field(text, "format", dict, {"type": "text"}, path="text.format") or {"type": "text"}
    choice(fmt, "type", ("text", "json_object", "json_schema"), "text", "text.format.type")
    schema = schema_of(fmt)  # checked for compaction too, which answers in plain text
    foreign = None if svc.metrics is None else lambda kind: svc.metrics.foreign("responses", kind)
    messages = convert_input(body, svc.config.secret, foreign)
    if fmt.get("type") != "text":
        _format_note(messages, fmt)
    kwargs = {"reasoning_effort": effort} if effort else {}
    number(body, "max_output_tokens", None, 16, integer=True)  # OpenAI's least
    params = sampling(
        body,
        ("max_output_tokens",),
        min(svc.default_max_tokens, COMPACT_MAX_TOKENS) if compaction else svc.default_max_tokens,
        svc.max_model_len,
    )
    if compaction:
        _check_choice(tc, tools)  # checked as for a response, then not used:
        messages = messages + [{"role": "user", "content": COMPACT_PROMPT}]
        tc = "auto"  # the same tools as the turns before, so the prompt's prefix stays cached
    chat = ChatRequest(
        messages,
        params,
        tools.template or None,
        tc,
        False if effort == "none" or compaction else None,
        kwargs,
        json_schema=schema if not compaction else None,
        parallel_tool_calls=field(body, "parallel_tool_calls", bool, True),
    )
    max_calls = number(body, "max_tool_calls", None, 0, integer=True)
    parallel = field(body, "parallel_tool_calls", bool, True)
    echo = {
        "model": field(body, "model", str, svc.config.model_name),
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": parallel,
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": max_calls,
        "store": field(body, "store", bool, True),
        "text": {**text, "format": fmt},
        "reasoning": {"effort": effort, "summary": summary},
        "metadata": metadata,
        "user": body.get("user"),
        "service_tier": body.get("service_tier") or "default",
        "truncation": body.get("truncation") or "disabled",
        "prompt_cache_key": body.get("prompt_cache_key"),
        "safety_identifier": body.get("safety_identifier"),
        "previous_response_id": None,
        "background": False,
        "top_logprobs": 0,
    }
    opts = {
        "summary": summary in ("auto", "concise", "detailed"),
        "encrypted": "reasoning.encrypted_content" in include,
        "max_calls": 1 if not parallel else max_calls,
    }
    return Parsed(chat, tools, echo, field(body, "stream", bool, False), opts, compaction)


def tool_choice_of(tc):
    if tc is None or tc in ("auto", "none", "required"):
        return tc or "auto"
    if isinstance(tc, dict):
        t = tc.get("type")
        if t in ("function", "custom") and isinstance(tc.get("name"), str):
            ns = tc.get("namespace") if isinstance(tc.get("namespace"), str) else None
            return {"name": flat_name(ns, tc["name"])}
        if t == "allowed_tools" and tc.get("mode", "auto") in ("auto", "required"):
            return tc.get("mode", "auto")
    raise bad_request(
        "'tool_choice' must be 'auto', 'none', 'required', {\"type\": \"function\", \"name\": ...} or "
        '{"type": "allowed_tools", "mode": ...}; hosted tools do not run on this server',
        "tool_choice",
    )


def _check_choice(tc, tools: ToolMap) -> None:
    """The checks the service makes of a response's ``tool_choice``, for a compaction (which then
    lets the model answer in text)."""
    if tc not in ("auto", "none") and not tools.template:
        raise bad_request("tool_choice requires tools", "tool_choice")
    if isinstance(tc, dict) and tc["name"] not in tools.kinds:
        raise bad_request(
            f"tool_choice names {tc['name']!r}, which is not among the tools", "tool_choice"
        )


def schema_of(fmt: dict) -> dict | None:
    """The JSON schema a ``text.format`` asks for ({} = any JSON object), or None for plain text."""
    if fmt.get("type") == "json_schema":
        name_of(fmt, "name", "text.format.name")
        sch = fmt.get("schema")
        if not isinstance(sch, dict):
            raise bad_request(
                "'text.format.schema' must be a JSON schema object", "text.format.schema"
            )
        return sch
    return {} if fmt.get("type") == "json_object" else None


def _format_note(messages: list[dict], fmt: dict) -> None:
    note = "Answer with one JSON object and nothing else."
    if fmt.get("type") == "json_schema" and fmt.get("schema") is not None:
        note = f"Answer with one JSON value that matches this JSON schema, and nothing else:\n{json.dumps(fmt['schema'])}"
    if messages[0]["role"] == "system":
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{note}".strip()}
    else:
        messages.insert(0, {"role": "system", "content": note})
