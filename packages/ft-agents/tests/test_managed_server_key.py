"""ManagedServer hands the API key to `ft serve` through $FT_API_KEY: never on its command line,
where every user of the machine can read it (ps, /proc/PID/cmdline)."""

from ft_agents.server import ManagedServer


def test_the_key_travels_in_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FT_API_KEY", "inherited")
    srv = ManagedServer(
        "/models/m", tmp_path / "log", api_key="sk-secret", extra_args=["--port", "0"]
    )
    assert not any("sk-secret" in a for a in srv.argv) and "--api-key" not in srv.argv
    assert srv.env["FT_API_KEY"] == "sk-secret" and "sk-secret" not in srv.display()
    keyless = ManagedServer("/models/m", tmp_path / "log")
    assert "FT_API_KEY" not in keyless.env  # no key asked for: none inherited either
