"""max_model_len past the model's trained context is refused unless explicitly allowed."""

import pytest

from ft_core import Engine, FTError


def test_long_max_model_len_is_refused_then_allowed(monkeypatch):
    with pytest.raises(FTError, match="max_position_embeddings=4096.*FT_ALLOW_LONG_MAX_MODEL_LEN"):
        Engine.from_pretrained(None, max_model_len=8192)
    assert Engine.from_pretrained(None, max_model_len=1024).max_model_len == 1024
    monkeypatch.setenv("FT_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert Engine.from_pretrained(None, max_model_len=8192).max_model_len == 8192
