"""Install machinery without the network: Node version rules, finding harnesses (managed prefix first),
and running a package's own install scripts when npm skipped them, then linking its executables."""

import json
import os
from pathlib import Path

import pytest

from ft_agents import harnesses, install, paths


@pytest.mark.parametrize(
    "version,ok",
    [
        ((24, 16, 0), True),
        ((24, 21, 0), True),
        ((24, 15, 9), False),
        ((25, 3, 0), False),
        ((26, 10, 0), True),
        ((20, 20, 2), False),
        (None, False),
    ],
)
def test_openclaw_node_rule(version, ok):
    assert install.node_ok(version, (24, 16)) is ok


def test_managed_prefix_comes_before_path(agents_env, tmp_path, monkeypatch):
    h = harnesses.get("codex")
    on_path = tmp_path / "bin" / "codex"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert install.find_harness(h) == on_path
    managed = paths.npm_prefix() / "bin" / "codex"
    managed.parent.mkdir(parents=True)
    managed.write_text("#!/bin/sh\n")
    assert install.find_harness(h) == managed
    assert install.command(h, managed, None) == [str(managed)]
    oc = harnesses.get("openclaw")
    node = Path("/opt/node24/bin/node")
    assert install.command(oc, managed, node) == [str(node), str(managed.resolve())]


def test_skipped_postinstall_is_run_and_bins_linked(tmp_path):
    """Like Claude Code's package: a placeholder executable until `postinstall` puts the real one in place."""
    prefix = tmp_path / "npm"
    pkg = prefix / "lib" / "node_modules" / "@acme" / "agent"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "real.sh").write_text("#!/bin/sh\necho agent 1.2.3\n")
    (pkg / "package.json").write_text(
        json.dumps(
            {
                "name": "@acme/agent",
                "version": "1.2.3",
                "bin": {"agent": "bin/agent", "agent-tool": "bin/tool"},
                "scripts": {
                    "postinstall": "cp real.sh bin/agent && cp real.sh bin/tool && chmod +x bin/agent bin/tool",
                    "test": "false",
                },
            }
        )
    )
    install._run_package_scripts(pkg, None, open(os.devnull, "w"))
    for name in ("agent", "agent-tool"):
        link = prefix / "bin" / name
        assert link.is_symlink() and os.access(link, os.X_OK)
    assert install.installed_version(prefix, "@acme/agent") == "1.2.3"


def test_failing_install_script_is_reported(tmp_path):
    pkg = tmp_path / "npm" / "lib" / "node_modules" / "agent"
    pkg.mkdir(parents=True)
    scripts = {"postinstall": "echo boom >&2; exit 4"}
    (pkg / "package.json").write_text(json.dumps({"name": "agent", "scripts": scripts}))
    with pytest.raises(
        install.AgentsError, match="agent's postinstall script failed \\(4\\):\nboom"
    ):
        install._run_package_scripts(pkg, None, open(os.devnull, "w"))
