"""The context edits agent harnesses make between model calls, as our own small models of them.

A harness turns a session's true history (system prompt, user requests, assistant messages with
reasoning and tool calls, tool results) into the messages of the next call:

- ``OpenClawLike``: drops the thinking of every earlier assistant message, and re-appends a moving
  tail message (runtime context: time, call number) after the newest message on every call.
- ``OpenCodeLike``: prunes old tool outputs: walking back from the newest, outputs beyond a
  protected window are replaced by ``[Old tool result content cleared]`` once enough of them add up.
- ``ClaudeCodeLike``: a leading system block ``x-anthropic-billing-header: ...`` that differs between
  sessions; microcompact (all but the latest tool results cleared past a size); and compaction that
  rewrites the history into one summary message when the context grows past a limit.

Sizes are estimated as characters / 3 (about the tiny test tokenizer); thresholds are the real
harnesses' scaled down to tiny-model contexts.
"""

from __future__ import annotations

import copy
import json
import random

from agent_traces import content

CLEARED = "[Old tool result content cleared]"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "description": d,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string"} for k in ks},
                "required": list(ks),
            },
        },
    }
    for n, d, ks in (
        ("read", "Read a file of the workspace.", ("path",)),
        ("grep", "Search the workspace for a pattern.", ("pattern", "path")),
        ("bash", "Run a shell command and return its output.", ("command",)),
        ("edit", "Replace text in a file.", ("path", "old", "new")),
    )
]


def size(messages: list[dict]) -> int:
    """Estimated tokens of a message list."""
    return sum(len(json.dumps(m)) for m in messages) // 3


class Harness:
    name = "base"

    def __init__(self, rng: random.Random, system: str):
        self.rng, self.system = rng, system

    def messages(self, history: list[dict], call: int) -> list[dict]:
        """The messages of call number ``call`` (may rewrite ``history`` in place, as compaction does)."""
        return [{"role": "system", "content": self.system}, *copy.deepcopy(history)]


class OpenClawLike(Harness):
    name = "openclaw"

    def messages(self, history, call):
        out = super().messages(history, call)
        for m in out:
            if m["role"] == "assistant":
                m.pop("reasoning_content", None)
        tail = f"Runtime context: cwd=/work/project; time=10:{call:02d}; call={call}; os=linux"
        return out + [{"role": "system", "content": tail}]


class OpenCodeLike(Harness):
    name = "opencode"
    PROTECT, MINIMUM = (
        900,
        450,
    )  # tokens of newest tool output kept; prune once this much is prunable

    def messages(self, history, call):
        outputs = [m for m in history if m["role"] == "tool" and m["content"] != CLEARED]
        seen, prunable = 0, []
        for m in reversed(outputs):
            seen += len(m["content"]) // 3
            if seen > self.PROTECT:
                prunable.append(m)
        if sum(len(m["content"]) // 3 for m in prunable) >= self.MINIMUM:
            for m in prunable:  # in the true history: a pruned output stays pruned
                m["content"] = CLEARED
        return super().messages(history, call)


class ClaudeCodeLike(Harness):
    name = "claude_code"
    KEEP, MICRO, COMPACT = (
        3,
        2600,
        4200,
    )  # tool results kept by microcompact; its trigger; compaction's

    def __init__(self, rng, system):
        cch = "".join(rng.choice("0123456789abcdef") for _ in range(16))
        super().__init__(
            rng,
            f"x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli; cch={cch};\n{system}",
        )

    def messages(self, history, call):
        if size(history) > self.MICRO:
            tools = [m for m in history if m["role"] == "tool"]
            for m in tools[: -self.KEEP]:
                m["content"] = CLEARED
        if size(history) > self.COMPACT:
            last_user = next(m for m in reversed(history) if m["role"] == "user")
            summary = (
                "This session is being continued from a previous conversation that ran out of context. "
                f"Summary: {content.prose(self.rng, 12)}\n\nThe last request was: {last_user['content']}"
            )
            history[:] = [{"role": "user", "content": summary}]
        return super().messages(history, call)


HARNESSES = {h.name: h for h in (OpenClawLike, OpenCodeLike, ClaudeCodeLike)}
