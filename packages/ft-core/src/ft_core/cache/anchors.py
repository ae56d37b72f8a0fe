"""Where to checkpoint recurrent state: anchors read from the model's tokenizer and chat template, and
the placement policies the prefix-state benchmark compares.

Agent harnesses edit context in whole blocks (they drop old thinking, replace old tool outputs,
re-append a tail message, compact history), so the state right at a block boundary is the state
a later, edited request can still resume from. ``AnchorTokens`` finds the block delimiters of a
model family: tokens a checkpoint goes right *after* (``</think>``, tool call and tool response
open/close, end of turn) and right *before* (turn start, ``<think>``), keeping only those the chat
template uses (or that end generation). ``CheckpointPolicy`` turns them into positions:

- ``anchors`` (ours): every block boundary of a prompt, the prompt end (before an empty thinking
  block that closes the generation prompt, which templates drop on re-rendering; both before and
  after, as one point of the per-prompt count, a thinking block the generation prompt opens), and a fallback
  every ``interval`` tokens inside long blocks; boundaries fewer than ``MIN_GAP`` ids apart count once; during decode after each delimiter the model emits, and
  the final state of every finished request;
- ``every_n`` (vLLM / SGLang style): every ``interval`` tokens;
- ``llama`` (llama.cpp style): the prompt end and the start of every user message;
- ``none``: no checkpoints.

Per prompt at most ``per_prompt`` positions are snapshot, the latest ones (the prompt end first).
A position p means "the state after ids[:p]".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

POLICIES = ("anchors", "every_n", "llama", "none")
MIN_GAP = 8  # anchors closer than this (e.g. </tool_call><|im_end|>\n<|im_start|>assistant\n) collapse into the last

_WORDS = r"think|tool|function|result|response|output|observation"
_AFTER = [
    re.compile(
        rf"^</[^<>]*({_WORDS})[^<>]*>$"
    ),  # </think>, </tool_call>, </tool_response>, </function_results>
    re.compile(
        r"^<(tool_call|tool_response|function_calls|function_results)>$"
    ),  # tool blocks open
    re.compile(r"tool.?(calls?|outputs?).?(begin|end)"),  # DeepSeek <｜tool▁calls▁begin｜> ...
    re.compile(
        r"^(<\|im_end\|>|<\|end\|>|<\|eot_id\|>|<\|end_of_turn\|>|<\|call\|>|<\|return\|>)$"
    ),  # end of turn
]
_BEFORE = [
    re.compile(
        r"^(<\|im_start\|>|<\|start\|>|<\|(user|assistant|system|observation)\|>|\[INST\]|<think>)$"
    ),
    re.compile(r"｜(User|Assistant)｜"),
]
_SPACES = ("\n", "\n\n", "\n\n\n", " \n", "\n ")


@dataclass(frozen=True)
class AnchorTokens:
    after: frozenset[
        int
    ]  # a checkpoint right after these tokens (and one whitespace token after them)
    before: frozenset[int]  # a checkpoint right before these tokens
    space: frozenset[int] = frozenset()  # whitespace-only tokens
    user_header: tuple[int, ...] = ()  # the ids that open a user message (the llama policy)
    think: frozenset[int] = frozenset()  # tokens that open a thinking block (``<think>``)

    @classmethod
    def from_tokenizer(cls, tok) -> AnchorTokens:
        """Read the delimiters from ``tok`` (``ft_core.tokenizer.Tokenizer``): added/special tokens whose
        text matches a block delimiter and that the chat template uses, plus the end-of-generation ids."""
        template = tok.chat_template or ""
        eos = set(tok.eos_token_ids)
        after, before = set(eos), set()
        for i, text in _added_tokens(tok).items():
            if template and text not in template and i not in eos:
                continue
            if any(p.search(text) for p in _AFTER):
                after.add(i)
            elif any(p.search(text) for p in _BEFORE):
                before.add(i)
        space = {
            ids[0] for s in _SPACES if len(ids := tok.encode(s, add_special_tokens=False)) == 1
        }
        think = {i for i in before if _added_tokens(tok)[i] == "<think>"}
        return cls(
            frozenset(after),
            frozenset(before),
            frozenset(space),
            _user_header(tok),
            frozenset(think),
        )


def _added_tokens(tok) -> dict[int, str]:
    """id -> text of the tokenizer's added tokens (special and not)."""
    return {i: t.content for i, t in tok._tok.get_added_tokens_decoder().items()}


def _user_header(tok) -> tuple[int, ...]:
    """The first two ids of a rendered user message (e.g. ``<|im_start|>`` ``user``); () if unknown."""
    try:
        text = tok.apply_chat_template(
            [{"role": "user", "content": "\x00"}], add_generation_prompt=False
        )
    except Exception:  # no template, or one that needs more than a user message
        return ()
    head = text[: text.find("\x00")]
    ids, added = tok.encode(head, add_special_tokens=False), _added_tokens(tok)
    for k in range(len(ids) - 1, -1, -1):  # from the last added/special token of the prefix
        if ids[k] in added:
            return tuple(ids[k : k + 2])
    return ()


@dataclass(frozen=True)
class CheckpointPolicy:
    kind: str  # one of POLICIES
    tokens: AnchorTokens
    interval: int = 1024  # every_n spacing; anchors: fallback spacing inside long blocks
    per_prompt: int = 2  # snapshots per prompt at most (the latest ones)

    @property
    def at_finish(self) -> bool:
        """Checkpoint the final state of a finished request (the end of its turn)."""
        return self.kind == "anchors"

    def prompt_points(self, ids: list[int], start: int) -> list[int]:
        """Ascending positions p, start < p <= len(ids), to snapshot while prefilling ``ids`` from ``start``."""
        n = len(ids)
        if self.kind == "none" or n <= start:
            return []
        if self.kind == "every_n":
            pts = list(range((start // self.interval + 1) * self.interval, n + 1, self.interval))
        elif self.kind == "llama":
            h = self.tokens.user_header
            pts = [i for i in range(1, n - len(h) + 1) if h and tuple(ids[i : i + len(h)]) == h] + [
                n
            ]
        else:
            pts, extra = self._anchor_points(ids)
            if (
                extra is not None and start < extra and self.per_prompt > 0
            ):  # a token or two past the lasting
                # end: one more point, not counted (GreedyDual evicts it first: it saves those few tokens)
                return sorted({p for p in pts if start < p < extra})[-self.per_prompt :] + [extra]
        pts = sorted({p for p in pts if start < p <= n})
        return pts[-self.per_prompt :] if self.per_prompt > 0 else []

    def _anchor_points(self, ids: list[int]) -> tuple[list[int], int | None]:
        """(block boundaries, the prompt end when it lies inside a thinking block the generation prompt
        opened, else None)."""
        t, n = self.tokens, len(ids)
        # A generation prompt that opens and closes an empty thinking block (thinking off): templates drop
        # that block when the turn is rendered again, so the prompt's lasting end is right before it. One
        # that opens thinking (Qwen3.5: "assistant\n<think>\n"): a harness that drops the reasoning, or a
        # template that renders the block differently ("<think>\n\n</think>"), parts from this prompt right
        # before <think> too; the prompt end itself is then an extra point (see prompt_points).
        k = max((i for i in range(max(0, n - 2 * MIN_GAP), n) if ids[i] in t.think), default=None)
        end = k if k is not None and k > 0 else n
        pts = {end}
        for i, x in enumerate(ids[:end]):
            if x in t.before and i > 0:
                pts.add(i)
            elif x in t.after:
                pts.add(min(end, i + 2 if i + 1 < n and ids[i + 1] in t.space else i + 1))
        kept: list[int] = []
        for p in sorted(
            pts, reverse=True
        ):  # boundaries a token or two apart: the later one serves both
            if not kept or kept[-1] - p >= MIN_GAP:
                kept.append(p)
        out, last = [], 0
        for p in reversed(kept):  # fallback inside long blocks
            out.extend(range(last + self.interval, p, self.interval))
            out.append(p)
            last = p
        opened = end < n and not any(x in t.after for x in ids[end + 1 :])
        return out, (n if opened else None)

    def decode_point(self, ids: list[int], pos: int) -> bool:
        """During decode: snapshot the state after ``ids[:pos]`` (the token ids[pos-1] was just computed)?"""
        if self.kind == "anchors":
            return ids[pos - 1] in self.tokens.after or pos % self.interval == 0
        return self.kind == "every_n" and pos % self.interval == 0
