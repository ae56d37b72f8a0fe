"""docs/structure.md names every module of the tree (test files aside), and every entry names a file
that exists: the code map cannot rot silently.

An entry is a bullet ``- `PATH` — ...`` under a section ``## packages/NAME (...)``, ``## tests/``
or ``## benchmarks/``; PATH is relative to the section's folder, and to ``src/<module>/`` for a
package's Python modules. ``{a,b}`` names several files, ``<word>`` matches any characters and a
PATH ending in ``/`` stands for the whole folder.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = (".py", ".h", ".cpp", ".cu", ".c", ".txt")
_ENTRY = re.compile(r"^- `([^`]+)` — ")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^{}]+)\}", path)
    if not m:
        return [re.sub(r"<[^<>]+>", "*", path)]
    return [
        x
        for alt in m.group(1).split(",")
        for x in _expand(path[: m.start()] + alt + path[m.end() :])
    ]


def _entries() -> list[tuple[str, str]]:
    """(section folder, glob of one entry) for every entry of the code map."""
    out, base = [], None
    for line in (ROOT / "docs" / "structure.md").read_text().splitlines():
        if line.startswith("## "):
            base = line[3:].split(" (")[0].strip().rstrip("/")
        elif base and (m := _ENTRY.match(line)):
            out += [(base, g) for g in _expand(m.group(1))]
    return out


def _candidates(base: str, pattern: str) -> list[str]:
    """The repository paths ``pattern`` of section ``base`` may mean."""
    paths = [f"{base}/{pattern}"]
    src = ROOT / base / "src"
    if src.is_dir():
        paths += [f"{base}/src/{d.name}/{pattern}" for d in src.iterdir() if d.is_dir()]
    return [p + "*" if p.endswith("/") else p for p in paths]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def _documented(path: str) -> bool:
    p = Path(path)
    if p.suffix not in SOURCES or p.name == "__init__.py" or p.name == "conftest.py":
        return False
    if p.name.startswith("test_") or (p.suffix == ".txt" and p.name != "CMakeLists.txt"):
        return False
    return path.startswith(("packages/", "tests/", "benchmarks/"))


def test_every_module_is_in_the_code_map():
    globs = [c for base, pat in _entries() for c in _candidates(base, pat)]
    missing = [
        f for f in _tracked() if _documented(f) and not any(fnmatch.fnmatch(f, g) for g in globs)
    ]
    assert not missing, "docs/structure.md has no line for:\n" + "\n".join(missing)


def test_every_entry_names_a_file():
    files = _tracked()
    stale = [
        f"{base}: {pat}"
        for base, pat in _entries()
        if not any(fnmatch.fnmatch(f, g) for g in _candidates(base, pat) for f in files)
    ]
    assert not stale, "docs/structure.md names files that do not exist:\n" + "\n".join(stale)
