"""Imports between workspace packages point one way: ft-kernels <- ft-core <- ft-serve <- ft-agents,
and ft-agents never imports engine internals (DESIGN §1)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "packages"
ORDER = ["ft_kernels", "ft_core", "ft_serve", "ft_agents"]
ALLOWED = {"ft_kernels": set(), "ft_core": {"ft_kernels"}, "ft_serve": {"ft_core", "ft_kernels"}, "ft_agents": set()}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("pkg", ORDER)
def test_imports_point_one_way(pkg):
    src = ROOT / pkg.replace("_", "-") / "src" / pkg
    files = list(src.rglob("*.py"))
    assert files
    for f in files:
        bad = (_imports(f) & set(ORDER)) - ALLOWED[pkg] - {pkg}
        assert not bad, f"{f.relative_to(ROOT)} imports {sorted(bad)}"
