"""Imports between workspace packages point one way: ft-kernels <- ft-core <- ft-serve <- ft-agents,
and ft-agents never imports engine internals (DESIGN §1)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "packages"
ORDER = ["ft_kernels", "ft_core", "ft_serve", "ft_agents"]
ALLOWED = {
    "ft_kernels": set(),
    "ft_core": {"ft_kernels"},
    "ft_serve": {"ft_core", "ft_kernels"},
    "ft_agents": set(),
}


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


# Inside ft_core: what each folder may import (besides itself and the leaf modules). The loader
# builds models and expert banks, never the reverse; memory/ sizes pools it is handed.
CORE = ROOT / "ft-core" / "src" / "ft_core"
CORE_LEAVES = {"errors", "model_config", "config", "fla_check", "paths", "env"}
CORE_FOLDERS = {
    "device": set(),
    "cache": set(),
    "experts": {"device"},
    "tokenizer": set(),
    "layers": {"cache", "experts"},
    "models": {"cache", "experts", "layers"},
    "memory": {"cache", "experts", "device"},
    "loader": {"experts", "models", "tokenizer", "nonfinite"},
}


def _core_units(path: Path) -> set[str]:
    """The ft_core folders / top-level modules ``path`` imports (lazy imports included)."""
    pkg = path.relative_to(CORE).parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = list(pkg)[: len(pkg) - node.level + 1]
            names = [".".join(["ft_core", *base, *([node.module] if node.module else [])])]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + (
                [f"ft_core.{a.name}" for a in node.names] if node.module == "ft_core" else []
            )
        out |= {n.split(".")[1] for n in names if n.startswith("ft_core.")}
    return out


@pytest.mark.parametrize("folder", sorted(CORE_FOLDERS))
def test_core_folders_point_one_way(folder):
    files = list((CORE / folder).rglob("*.py"))
    assert files
    for f in files:
        bad = _core_units(f) - CORE_FOLDERS[folder] - CORE_LEAVES - {folder}
        assert not bad, f"ft_core/{f.relative_to(CORE)} imports ft_core.{sorted(bad)}"


def test_core_leaves_import_only_leaves():
    for leaf in sorted(CORE_LEAVES):
        bad = _core_units(CORE / f"{leaf}.py") - CORE_LEAVES
        assert not bad, f"ft_core/{leaf}.py imports ft_core.{sorted(bad)}"
