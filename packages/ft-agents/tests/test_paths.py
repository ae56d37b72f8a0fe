"""Where ft-agents keeps its files: launch folders (pruned) and the sessions linked from them (kept)."""

import os

from ft_agents import paths


def test_links_point_into_a_private_store_and_pruning_launches_keeps_it(agents_env, monkeypatch):
    monkeypatch.setattr(paths, "KEEP_LAUNCHES", 2)
    store = paths.sessions_dir("codex")
    assert store == agents_env / "agents-state" / "sessions" / "codex"
    first = paths.new_launch_dir("codex")
    link = first / "codex" / "sessions"
    paths.link_sessions(store, {link: store / "sessions"})
    assert link.is_symlink() and link.resolve() == store / "sessions"
    assert store.stat().st_mode & 0o777 == 0o700 and store.parent.stat().st_mode & 0o777 == 0o700
    (link / "2026").mkdir()
    (link / "2026" / "rollout.jsonl").write_text("turn 1\n")  # written through the link
    assert (store / "sessions" / "2026" / "rollout.jsonl").read_text() == "turn 1\n"

    second = paths.new_launch_dir("codex")
    paths.link_sessions(
        store, {second / "codex" / "sessions": store / "sessions"}
    )  # an existing store is reused
    os.utime(first, (1, 1))  # the oldest two
    os.utime(second, (2, 2))
    paths.new_launch_dir("codex")
    paths.new_launch_dir("codex")
    assert not first.exists() and not second.exists()  # pruned: rmtree removed the links ...
    assert (
        store / "sessions" / "2026" / "rollout.jsonl"
    ).read_text() == "turn 1\n"  # ... not what they point to
