"""Service: prompt rendering (assistant prefill, forced tool calls), and the persistent signing key."""

import pytest

from ft_core import SamplingParams
from ft_serve.server.app import server_secret
from ft_serve.server.config import ServerConfig
from ft_serve.server.engine_loop import EngineLoop
from ft_serve.server.errors import ApiError
from ft_serve.server.service import ChatRequest, Service


@pytest.fixture(scope="module")
def svc(demo_engine):
    return Service(EngineLoop(demo_engine), ServerConfig(model_name="t"))


def text(svc, ids):
    return svc.engine.tokenizer.decode(ids, skip_special_tokens=False)


def test_final_assistant_message_is_continued(svc):
    msgs = [
        {"role": "user", "content": "Say it"},
        {"role": "assistant", "content": "The answer is"},
    ]
    ids, in_reasoning, forced = svc.render(ChatRequest(msgs, SamplingParams()))
    assert (
        text(svc, ids).endswith("<|im_start|>assistant\nThe answer is")
        and not forced
        and not in_reasoning
    )
    ids2, _, _ = svc.render(ChatRequest(msgs[:1], SamplingParams()))
    assert text(svc, ids2).endswith("<|im_start|>assistant\n")


def test_forced_tool_call_openings(svc):
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "x"}]
    ids, _, forced = svc.render(ChatRequest(msgs, SamplingParams(), tools, "required"))
    assert forced == "<tool_call>\n" and text(svc, ids).endswith(
        "</think>\n\n<tool_call>\n"
    )  # thinking off, call opened
    _, _, forced = svc.render(ChatRequest(msgs, SamplingParams(), tools, {"name": "get"}))
    assert forced == "<tool_call>\n"  # hermes: the grammar forces the name
    with pytest.raises(ApiError) as e:
        svc.render(ChatRequest(msgs, SamplingParams(), tools, {"name": "other"}))
    assert e.value.param == "tool_choice"
    _, _, forced = svc.render(ChatRequest(msgs, SamplingParams(), tools, "none"))
    assert forced == ""


def test_signing_key_persists(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_CACHE_DIR", str(tmp_path))
    k1 = server_secret()
    assert len(k1) == 32 and server_secret() == k1
    assert (tmp_path / "server-secret").stat().st_mode & 0o777 == 0o600


def test_special_tokens_are_hidden_except_parser_markers(svc):
    tok = svc.engine.tokenizer
    hidden = {tok.id_to_token(i) for i in svc.hidden_ids}
    assert {"<|endoftext|>", "<|im_end|>", "<|im_start|>"} <= hidden
    assert not hidden & {"<think>", "</think>", "<tool_call>", "</tool_call>"}
