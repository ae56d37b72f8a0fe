"""From one internal ChatRequest to a stream of parsed output events (DESIGN §2):
chat template + tokenizer -> EngineLoop -> detokenizer -> stop strings -> reasoning/tool parsers.

Every API adapter builds a ``ChatRequest`` (or raw prompt ids for /v1/completions), calls
``Service.start`` and renders the ``Generation``'s events in its own wire format.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from ft_core import SamplingParams

from ft_serve.parsers import MARKERS, Event, auto_parsers, make_parser
from ft_serve.parsers.families import FAMILIES
from ft_serve.server.config import ServerConfig
from ft_core.tokenizer.detok import IncrementalDetokenizer, StopStrings
from ft_serve.server.engine_loop import EngineLoop
from ft_serve.server.errors import ApiError, bad_request
from ft_serve.server.structured import Grammars


@dataclass
class ChatRequest:
    """An API-neutral chat request. ``messages`` are in the Hugging Face chat-template form (role,
    content str, reasoning_content, tool_calls [{id, type, function {name, arguments dict}}],
    tool_call_id); ``tools`` in the OpenAI Chat form [{"type": "function", "function": {...}}]."""

    messages: list[dict]
    params: SamplingParams
    tools: list[dict] | None = None
    tool_choice: str | dict = "auto"  # "auto" | "none" | "required" | {"name": NAME}
    thinking: bool | None = None  # None: the template's default
    template_kwargs: dict = field(
        default_factory=dict
    )  # extra chat-template variables (reasoning_effort, ...)
    json_schema: dict | None = (
        None  # structured output: the answer is JSON of this schema ({} = any object)
    )
    parallel_tool_calls: bool = True


class Generation:
    """One running request: iterate it for parser ``Event``s; afterwards the usage and finish fields
    are set. ``finish_reason``: "stop" | "length" | "abort" | "error"; ``tool_calls`` the complete calls."""

    def __init__(
        self,
        service: "Service",
        prompt_ids: list[int],
        params: SamplingParams,
        parser,
        forced: str,
        constraint=None,
    ):
        self.service, self.prompt_ids, self.params = service, prompt_ids, params
        self.constraint = constraint
        self.prompt_tokens = len(prompt_ids)
        self.completion_tokens = 0
        self.cached_tokens = 0
        self._reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        self.error: str | None = None
        self.error_status = 500
        self._parser, self._forced = parser, forced
        tok = service.engine.tokenizer
        self._drop = service.hidden_ids | set(params.stop_token_ids)
        self._detok = IncrementalDetokenizer(lambda ids: tok.decode(ids, skip_special_tokens=False))
        self._stops = StopStrings(params.stop)
        self._req = None
        self.created = time.time()
        self.first_token_at: float | None = None

    @property
    def tool_calls(self) -> list[dict]:
        return self._parser.tool_calls

    @property
    def reasoning_tokens(self) -> int:
        """Tokens of the reasoning text (re-encoded; the markers around it are not counted)."""
        text = "".join(self._reasoning)
        return (
            len(self.service.engine.tokenizer.encode(text, add_special_tokens=False)) if text else 0
        )

    def cancel(self) -> None:
        if self._req is not None and self.finish_reason is None:
            self.service.loop.abort(self._req)

    async def __aiter__(self):
        m = self.service.metrics
        self._req = self.service.loop.submit(self.prompt_ids, self.params, self.constraint)
        t0 = last = time.perf_counter()
        try:
            if self._forced:
                for ev in self._parser.feed(self._forced):
                    yield self._count(ev)
            while True:
                u = await self._req.updates.get()
                now = time.perf_counter()
                self.cached_tokens = max(self.cached_tokens, u.cached_tokens)
                if u.token_ids:
                    self.completion_tokens += len(u.token_ids)
                    if self.first_token_at is None:
                        self.first_token_at = now
                        if m:
                            m.ttft.observe(now - t0)
                    elif m:
                        m.itl.observe((now - last) / len(u.token_ids))
                    last = now
                    text = self._detok.push([i for i in u.token_ids if i not in self._drop])
                    for ev in self._parser.feed(self._stops.push(text)):
                        yield self._count(ev)
                if u.finish_reason is not None:
                    self.finish_reason, self.error, self.error_status = (
                        u.finish_reason,
                        u.error,
                        u.error_status,
                    )
                    break
            tail = self._stops.push(self._detok.flush()) + self._stops.flush()
            for ev in self._parser.feed(tail) + self._parser.finish():
                yield self._count(ev)
            self.stop_sequence = self._stops.matched
            if self.stop_sequence is not None:
                self.finish_reason = "stop"
        finally:
            if (
                self.finish_reason is None
            ):  # the consumer went away (client disconnect): free the pages now
                self.service.loop.abort(self._req)
                self.finish_reason = "abort"
            if m:
                m.finished(self)

    def _count(self, ev: Event) -> Event:
        if ev.kind == "reasoning":
            self._reasoning.append(ev.text)
        return ev


class Service:
    def __init__(self, loop: EngineLoop, config: ServerConfig, metrics=None):
        self.loop, self.engine, self.config, self.metrics = loop, loop.engine, config, metrics
        eng = self.engine
        self.eos_ids = set(eng.eos_ids)
        # Special tokens kept out of the text (as skip_special_tokens would), except the parsers' markers.
        tok = eng.tokenizer
        self.hidden_ids = self.eos_ids | {
            i for i in tok.special_ids if tok.id_to_token(i) not in MARKERS
        }
        self.max_model_len = eng.max_model_len
        self.default_max_tokens = (
            config.default_max_tokens or self.max_model_len
        )  # the engine stops at the context end
        tool, reasoning = auto_parsers(eng.model_config.model_type, eng.tokenizer.chat_template)
        self.tool_parser = tool if config.tool_call_parser == "auto" else config.tool_call_parser
        self.reasoning_parser = (
            reasoning if config.reasoning_parser == "auto" else config.reasoning_parser
        )
        self.grammars = Grammars(eng)

    # ---- prompts ------------------------------------------------------------------------------
    def render(self, req: ChatRequest) -> tuple[list[int], bool, str]:
        """(prompt ids, starts inside reasoning, forced assistant prefix)."""
        tools = req.tools or None
        choice = req.tool_choice
        if choice == "none":
            tools = None
        if choice not in ("auto", "none") and not tools:
            raise bad_request("tool_choice requires tools", "tool_choice")
        forced = ""
        flags = dict(req.template_kwargs)
        if req.thinking is not None:
            flags.setdefault("enable_thinking", req.thinking)
        if choice == "required" or isinstance(choice, dict):
            name = choice.get("name") if isinstance(choice, dict) else None
            if name is not None and name not in {t["function"]["name"] for t in tools}:
                raise bad_request(
                    f"tool_choice names {name!r}, which is not among the tools", "tool_choice"
                )
            fam = FAMILIES.get(self.tool_parser)
            if fam is None:
                raise bad_request(
                    f"tool_choice {choice!r} needs a tool-call parser; this server runs "
                    f"--tool-call-parser {self.tool_parser}",
                    "tool_choice",
                )
            forced = fam.forced_opening(
                name
            )  # the family's grammar forces the rest (structured.py)
            flags["enable_thinking"] = False  # the call opens the turn: no room for thinking first
        if req.json_schema is not None:
            flags["enable_thinking"] = False  # the constrained answer starts at once
        last = req.messages[-1] if req.messages else {}
        if (
            last.get("role") == "assistant"
            and last.get("content")
            and not last.get("tool_calls")
            and not forced
        ):
            text = self._continue_final(
                req.messages, tools, flags
            )  # a prefilled assistant turn goes on
        else:
            text = self.engine.tokenizer.apply_chat_template(
                req.messages, tools=tools, add_generation_prompt=True, **flags
            )
        starts_in_reasoning = self.reasoning_parser == "think" and text.rstrip().endswith("<think>")
        ids = self.engine.tokenizer.encode(text + forced, add_special_tokens=False)
        return ids, starts_in_reasoning and not forced, forced

    def _continue_final(self, messages: list[dict], tools, flags: dict) -> str:
        """The prompt that continues the final assistant message: rendered whole, cut right after that
        message's text (so the template's end-of-turn marker is not in it)."""
        text = self.engine.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=False, **flags
        )
        content = messages[-1]["content"]
        cut = text.rfind(content)
        if cut < 0:
            raise bad_request(
                "the final assistant message cannot be continued: the chat template does not keep its text",
                "messages",
            )
        return text[: cut + len(content)]

    def check_length(self, n: int, param: str) -> None:
        if n >= self.max_model_len:
            raise ContextLengthError(n, self.max_model_len, param)

    async def count_tokens(self, req: ChatRequest) -> int:
        """Prompt tokens of ``req``, rendered in a worker thread (off the event loop)."""
        return len((await asyncio.to_thread(self.render, req))[0])

    # ---- generation ---------------------------------------------------------------------------
    async def start_chat(self, req: ChatRequest) -> Generation:
        """Render and tokenize ``req`` in a worker thread (a megabyte prompt takes seconds; the
        event loop serves the other requests meanwhile), then set up its Generation. Raises
        ContextLengthError (with the token count) for a prompt the context cannot hold."""
        ids, in_reasoning, forced = await asyncio.to_thread(self.render, req)
        self.check_length(len(ids), "messages")
        tools_on = bool(req.tools) and req.tool_choice != "none"
        parser = make_parser(
            self.tool_parser if tools_on else "none",
            self.reasoning_parser,
            starts_in_reasoning=in_reasoning,
            tools_enabled=tools_on,
            tools=req.tools if tools_on else None,
        )
        return Generation(
            self,
            ids,
            self._params(req.params),
            parser,
            forced,
            self._constraint(req, forced, len(ids)),
        )

    def _constraint(self, req: ChatRequest, forced: str, prompt_tokens: int):
        """The structured-output constraint of ``req`` (JSON schema, the rest of a forced tool call in the
        tool parser's format), or None."""
        if forced:
            name = req.tool_choice.get("name") if isinstance(req.tool_choice, dict) else None
            budget = min(req.params.max_tokens, self.max_model_len - prompt_tokens)
            c = self.grammars.forced_calls(
                self.tool_parser, req.tools, name, req.parallel_tool_calls, budget
            )
            if c is not None:
                return c
        if req.json_schema is not None:
            return self.grammars.json(req.json_schema or None)
        return None

    def start_completion(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        self.check_length(len(prompt_ids), "prompt")
        return Generation(self, prompt_ids, self._params(params), make_parser("none", "none"), "")

    def _params(self, p: SamplingParams) -> SamplingParams:
        from dataclasses import replace

        return replace(p, skip_special_tokens=False)


def parse_arguments(args) -> dict | str:
    """Tool-call arguments as templates want them: a dict when the JSON text parses to one."""
    if isinstance(args, str):
        try:
            v = json.loads(args)
        except json.JSONDecodeError:
            return args
        return v if isinstance(v, dict) else args
    return args


class ContextLengthError(ApiError):
    """400 context_length_exceeded; ``tokens``: the prompt's length (so nobody renders it again)."""

    def __init__(self, tokens: int, limit: int, param: str):
        super().__init__(
            400,
            f"the prompt has {tokens} tokens; this model's context length "
            f"(max_model_len) is {limit}, which must hold the prompt and at least "
            "one output token",
            param,
            "context_length_exceeded",
        )
        self.tokens = tokens


def check_api_error(g: Generation) -> None:
    """Raise the engine's failure of ``g`` (if any) as an ApiError: 400 for a request the engine refused."""
    if g.finish_reason == "error":
        raise ApiError(g.error_status, g.error or "generation failed")
