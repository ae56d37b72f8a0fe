"""What the server and the engine read from a tiny checkpoint's chat template: the parsers
``auto_parsers`` picks, and the block delimiters ``AnchorTokens`` places recurrent-state checkpoints
at (Qwen3.5's XML tool calls; Qwen3-Next keeps Qwen3's hermes JSON calls)."""

import pytest

from ft_core import Engine
from ft_core.cache.anchors import AnchorTokens, CheckpointPolicy
from ft_serve.parsers.registry import auto_parsers

SYSTEM = {"role": "system", "content": "You are a coding agent. Answer briefly and use the tools."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
TOOL_TURN = [
    {"role": "user", "content": "What is in main.py?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I should read the file first, then the tests.",
        "tool_calls": [{"function": {"name": "read", "arguments": {"path": "main.py"}}}],
    },
    {"role": "tool", "content": "def main():\n    print('hello world')\n"},
]


@pytest.mark.parametrize(
    ("arch", "parsers"),
    [("qwen3_5_moe", ("qwen3_coder", "think")), ("qwen3_next", ("hermes", "think"))],
)
def test_auto_parsers(tiny_ckpt, arch, parsers):
    eng = Engine.from_pretrained(tiny_ckpt(arch))
    assert auto_parsers(eng.model_config.model_type, eng.tokenizer.chat_template) == parsers


def test_qwen35_anchor_tokens(tiny_ckpt):
    tok = Engine.from_pretrained(tiny_ckpt("qwen3_5_moe")).tokenizer
    a = AnchorTokens.from_tokenizer(tok)
    names = lambda ids: {tok.id_to_token(i) for i in ids}  # noqa: E731
    assert names(a.after) == {
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<|im_end|>",
        "<|endoftext|>",
    }
    assert names(a.before) == {"<|im_start|>", "<think>"} and names(a.think) == {"<think>"}
    assert [tok.id_to_token(i) for i in a.user_header] == ["<|im_start|>", "user"]

    text = tok.apply_chat_template([SYSTEM, *TOOL_TURN], tools=TOOLS)
    assert (
        "<tool_call>\n<function=read>\n<parameter=path>\nmain.py\n</parameter>\n</function>\n</tool_call>"
        in text
    )
    ids = tok.encode(text, add_special_tokens=False)
    sys_end = (
        ids.index(tok.token_to_id("<|im_end|>")) + 2
    )  # the system turn (tool list and its example call)
    pts = CheckpointPolicy("anchors", a, interval=10_000, per_prompt=100).prompt_points(ids, 0)
    ends = [tok.decode(ids[:p], skip_special_tokens=False) for p in pts if p >= sys_end]
    want = [
        "tools.<|im_end|>\n",  # the system turn's end, before the user turn
        "main.py?<|im_end|>\n<|im_start|>assistant\n",  # before <think> (the header: < 8 ids before)
        "the tests.\n</think>\n\n<tool_call>\n",  # </think> and the call's open (< 8 ids apart)
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n",  # right before the tool output
        "</tool_response><|im_end|>\n<|im_start|>assistant\n",  # before the opened <think>, kept next to the
        # prompt end (a dropped or re-rendered thinking block parts there); serves the tool output's end too
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n",
    ]  # the prompt end: thinking opened
    assert (
        len(ends) == len(want)
        and all(e.endswith(w) for e, w in zip(ends, want))
        and pts[-1] == len(ids)
    )
