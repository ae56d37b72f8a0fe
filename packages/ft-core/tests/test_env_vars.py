"""ft_core.env: the variables ft-core and ft-serve read, parsed in one place; a bad value names the variable."""

import pytest
from ft_core import FTError, env


def test_unset_or_empty_gives_the_default(monkeypatch):
    monkeypatch.delenv("FT_LOAD_THREADS", raising=False)
    assert env.integer("FT_LOAD_THREADS") == 8
    monkeypatch.setenv("FT_LOAD_THREADS", "")
    assert env.integer("FT_LOAD_THREADS") == 8
    monkeypatch.setenv("FT_LOAD_THREADS", "3")
    assert env.integer("FT_LOAD_THREADS") == 3


@pytest.mark.parametrize(
    "value,match",
    [
        ("many", r"\$FT_LOAD_THREADS='many': expected an integer"),
        ("0", r"\$FT_LOAD_THREADS=0: must be >= 1"),
    ],
)
def test_a_bad_value_names_the_variable(monkeypatch, value, match):
    monkeypatch.setenv("FT_LOAD_THREADS", value)
    with pytest.raises(FTError, match=match):
        env.integer("FT_LOAD_THREADS")


def test_flags_and_unknown_names(monkeypatch):
    monkeypatch.setenv("FT_LOAD_HUGEPAGES", "1")
    assert env.flag("FT_LOAD_HUGEPAGES")
    monkeypatch.setenv("FT_LOAD_HUGEPAGES", "yes")
    assert not env.flag("FT_LOAD_HUGEPAGES")
    with pytest.raises(KeyError):
        env.text("FT_NOT_A_VARIABLE")  # every variable read is declared in env.VARS
