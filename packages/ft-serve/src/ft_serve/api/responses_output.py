"""Responses API output side: parser events -> output items, with the streaming events around each.

Per item, in order (what the OpenAI API sends and Codex reads):
  reasoning      output_item.added, [reasoning_summary_part.added], content_part.added (reasoning_text),
                 reasoning_text.delta... [+ reasoning_summary_text.delta...], reasoning_text.done,
                 content_part.done, [reasoning_summary_text.done, reasoning_summary_part.done], output_item.done
  message        output_item.added, content_part.added, output_text.delta..., output_text.done,
                 content_part.done, output_item.done
  function_call  output_item.added, function_call_arguments.delta, function_call_arguments.done, output_item.done
  custom call    output_item.added, custom_tool_call_input.delta, custom_tool_call_input.done, output_item.done
  local shell    output_item.added, output_item.done
Our reasoning is the model's raw text, so it is reported as ``content`` (reasoning_text); it is copied
into ``summary`` only when the request asks for a summary (``reasoning.summary`` auto|concise|detailed).
"""

from __future__ import annotations

import json
import secrets

from ft_serve.api.responses_tools import ToolMap
from ft_serve.api.signing import seal
from ft_serve.api.sse import sse_event
from ft_serve.parsers import Event


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class OutputBuilder:
    """Builds the ``output`` items of one response from parser events (``feed`` each, then ``finish``
    once). Both return the SSE events the change produces; a non-streaming caller drops them.
    ``output`` holds the items, the open one included, in output-index order."""

    def __init__(
        self,
        tools: ToolMap,
        secret: bytes,
        *,
        summary: bool = False,
        encrypted: bool = False,
        max_calls: int | None = None,
    ):
        self.tools, self.secret = tools, secret
        self.summary, self.encrypted, self.max_calls = summary, encrypted, max_calls
        self.output: list[dict] = []
        self.seq = 0
        self._item: dict | None = None  # the open item
        self._text: list[str] = []  # its text so far (message / reasoning text, call arguments)
        self._call_index = -1  # parser index of the open call
        self._calls = 0

    def event(self, type_: str, **fields) -> str:
        out = sse_event(type_, {"type": type_, "sequence_number": self.seq, **fields})
        self.seq += 1
        return out

    # ---- events in ----------------------------------------------------------------------------
    def feed(self, ev: Event) -> list[str]:
        if ev.kind in ("reasoning", "content"):
            kind = "reasoning" if ev.kind == "reasoning" else "message"
            if self._item is not None and self._item["type"] == kind:
                return self._delta(ev.text)
            text = ev.text.lstrip()
            if not text:  # no item opens on whitespace
                return []
            return self._close() + self._open_text(kind) + self._delta(text)
        if ev.kind == "tool_call":
            out = self._close()
            if self.max_calls is not None and self._calls >= self.max_calls:
                return out
            self._calls += 1
            return out + self._open_call(ev)
        if ev.kind == "tool_args" and self._item is not None and ev.index == self._call_index:
            return self._delta(ev.text)
        return []

    def finish(self, status: str = "completed") -> list[str]:
        """Close the open item (``status``: "completed", or "incomplete" when the output was cut off)."""
        return self._close(status)

    # ---- items --------------------------------------------------------------------------------
    def _add(self, item: dict) -> list[str]:
        self._item, self._text = item, []
        self.output.append(item)
        return [
            self.event("response.output_item.added", output_index=len(self.output) - 1, item=item)
        ]

    def _where(self) -> dict:
        return {"item_id": self._item["id"], "output_index": len(self.output) - 1}

    def _open_text(self, kind: str) -> list[str]:
        if kind == "message":
            out = self._add(
                {
                    "type": "message",
                    "id": new_id("msg"),
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                }
            )
            return out + [
                self.event(
                    "response.content_part.added",
                    **self._where(),
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                )
            ]
        out = self._add({"type": "reasoning", "id": new_id("rs"), "summary": [], "content": []})
        if self.summary:
            out.append(
                self.event(
                    "response.reasoning_summary_part.added",
                    **self._where(),
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        return out + [
            self.event(
                "response.content_part.added",
                **self._where(),
                content_index=0,
                part={"type": "reasoning_text", "text": ""},
            )
        ]

    def _open_call(self, ev: Event) -> list[str]:
        kind, namespace, name = self.tools.lookup(ev.name)
        self._call_index = ev.index
        if kind == "custom":
            item = {
                "type": "custom_tool_call",
                "id": new_id("ctc"),
                "call_id": ev.id,
                "name": name,
                "input": "",
            }
        elif kind == "local_shell":
            item = {
                "type": "local_shell_call",
                "id": new_id("lsc"),
                "call_id": ev.id,
                "action": {"type": "exec", "command": []},
            }
        else:
            item = {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": ev.id,
                "name": name,
                "arguments": "",
            }
        if namespace and kind != "local_shell":
            item["namespace"] = namespace
        item["status"] = "in_progress"
        return self._add(item)

    def _delta(self, text: str) -> list[str]:
        if not text:
            return []
        self._text.append(text)
        t, w = self._item["type"], self._where()
        if t == "message":
            return [
                self.event(
                    "response.output_text.delta", **w, content_index=0, delta=text, logprobs=[]
                )
            ]
        if t == "reasoning":
            out = [self.event("response.reasoning_text.delta", **w, content_index=0, delta=text)]
            if self.summary:
                out.append(
                    self.event(
                        "response.reasoning_summary_text.delta", **w, summary_index=0, delta=text
                    )
                )
            return out
        if t == "function_call":
            return [self.event("response.function_call_arguments.delta", **w, delta=text)]
        return []  # custom / local shell calls are reported whole when they close

    def _close(self, status: str = "completed") -> list[str]:
        item = self._item
        if item is None:
            return []
        text, w, out = "".join(self._text), self._where(), []
        t = item["type"]
        if t == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            item.update(status=status, content=[part])
            out += [
                self.event(
                    "response.output_text.done", **w, content_index=0, text=text, logprobs=[]
                ),
                self.event("response.content_part.done", **w, content_index=0, part=part),
            ]
        elif t == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            item["content"] = [part]
            out += [
                self.event("response.reasoning_text.done", **w, content_index=0, text=text),
                self.event("response.content_part.done", **w, content_index=0, part=part),
            ]
            if self.summary:
                s = {"type": "summary_text", "text": text}
                item["summary"] = [s]
                out += [
                    self.event(
                        "response.reasoning_summary_text.done", **w, summary_index=0, text=text
                    ),
                    self.event(
                        "response.reasoning_summary_part.done", **w, summary_index=0, part=s
                    ),
                ]
            if self.encrypted:
                item["encrypted_content"] = seal(self.secret, "reasoning", text)
        elif t == "function_call":
            item.update(arguments=text, status="completed")
            out.append(self.event("response.function_call_arguments.done", **w, arguments=text))
        elif t == "custom_tool_call":
            item.update(input=_custom_input(text), status="completed")
            out += [
                self.event("response.custom_tool_call_input.delta", **w, delta=item["input"]),
                self.event("response.custom_tool_call_input.done", **w, input=item["input"]),
            ]
        else:
            item.update(action=_shell_action(text), status="completed")
        out.append(
            self.event("response.output_item.done", output_index=w["output_index"], item=item)
        )
        self._item, self._text = None, []
        return out


def _args(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _custom_input(text: str) -> str:
    """A free-form tool's input from the call's JSON arguments ({"input": ...}, or a lone string field)."""
    args = _args(text)
    if isinstance(args, dict):
        if isinstance(args.get("input"), str):
            return args["input"]
        strings = [v for v in args.values() if isinstance(v, str)]
        if len(args) == 1 and strings:
            return strings[0]
    return text


def _shell_action(text: str) -> dict:
    args = _args(text)
    args = args if isinstance(args, dict) else {"command": text}
    cmd = args.get("command", [])
    action = {
        "type": "exec",
        "command": ["bash", "-lc", cmd] if isinstance(cmd, str) else [str(c) for c in cmd],
    }
    if isinstance(args.get("workdir"), str):
        action["working_directory"] = args["workdir"]
    if isinstance(args.get("timeout_ms"), int):
        action["timeout_ms"] = args["timeout_ms"]
    return action
