"""Generate agent sessions: per session a harness, a few user tasks, each a tool loop of model calls.

    uv run python benchmarks/agent_traces/generate.py --sessions 6 --seed 0 --out traces.jsonl

Every call records the messages the harness sends and the assistant message the "model" answers
(thinking, then a tool call, or a final answer closing the task). Replaying a session through an
engine: prompt = chat template over ``messages`` (+ generation prompt), and the answer is decoded
forced to the tokens of ``response`` rendered by the same template.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from agent_traces import content  # noqa: E402
from agent_traces.harnesses import HARNESSES, TOOLS  # noqa: E402


@dataclass
class Call:
    messages: list[dict]
    response: dict  # the assistant message


@dataclass
class Session:
    harness: str
    tools: list[dict]
    calls: list[Call]


def _system(rng: random.Random) -> str:
    """The agent's system prompt, the same for every session (sessions share it as a prefix)."""
    return "You are a coding agent working in a git repository. " + content.prose(
        random.Random(1234), 24
    )


def _tool_call(rng: random.Random) -> tuple[dict, str]:
    """A tool call and the output it gets."""
    name = rng.choice(["read", "read", "grep", "bash", "edit"])
    p = content.path(rng)
    if name == "read":
        return {"name": "read", "arguments": {"path": p}}, content.source_file(
            rng, rng.randint(10, 30)
        )
    if name == "grep":
        pat = content.words(rng, 1)
        return {
            "name": "grep",
            "arguments": {"pattern": pat, "path": "src"},
        }, content.command_output(rng, rng.randint(4, 12))
    if name == "bash":
        return {
            "name": "bash",
            "arguments": {"command": "pytest -q tests"},
        }, content.command_output(rng, rng.randint(6, 18))
    old, new = content.words(rng, 4), content.words(rng, 4)
    return {
        "name": "edit",
        "arguments": {"path": p, "old": old, "new": new},
    }, f"Edited {p}: 1 replacement."


def make_session(
    harness: str, seed: int, tasks: int = 3, steps: tuple[int, int] = (2, 4)
) -> Session:
    rng = random.Random(seed)
    h = HARNESSES[harness](rng, _system(rng))
    history: list[dict] = []
    calls: list[Call] = []
    for _ in range(tasks):
        history.append({"role": "user", "content": content.prose(rng, rng.randint(1, 3))})
        n = rng.randint(*steps)
        for k in range(n + 1):
            msgs = h.messages(history, len(calls))
            think = content.thinking(rng, rng.randint(15, 45))
            if k < n:
                call, output = _tool_call(rng)
                resp = {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": think,
                    "tool_calls": [{"type": "function", "function": call}],
                }
            else:
                resp = {
                    "role": "assistant",
                    "content": content.prose(rng, rng.randint(1, 3)),
                    "reasoning_content": think,
                }
            calls.append(Call(msgs, resp))
            history.append(resp)
            if k < n:
                history.append({"role": "tool", "content": output})
    return Session(harness, TOOLS, calls)


def make_sessions(n: int, seed: int = 0, tasks: int = 3) -> list[Session]:
    """``n`` sessions cycling through the harnesses (openclaw, opencode, claude_code, ...)."""
    names = list(HARNESSES)
    return [make_session(names[i % len(names)], seed * 1000 + i, tasks) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--tasks", type=int, default=3, help="user tasks per session")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.out, "w") as f:
        for s in make_sessions(a.sessions, a.seed, a.tasks):
            f.write(json.dumps(asdict(s)) + "\n")
    print(a.out)


if __name__ == "__main__":
    main()
