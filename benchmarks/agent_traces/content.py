"""Deterministic filler text for agent traces: prose, thinking, source files, command output.

Every maker takes a ``random.Random`` so a seed fixes the whole trace. Sizes are in words/lines;
the tiny test tokenizer spends ~2-3 tokens on a word.
"""

from __future__ import annotations

import random

_WORDS = (
    "the a to of and in for on with that this it is be as by from at or not are was check file test "
    "function value error config module path line return call output input update change fix build run "
    "read write list parse load save cache request response server client token model layer state "
    "first then next after before because should would could need want look find use add remove keep "
    "small large new old same other each every some all one two three four user agent tool result "
    "patch diff branch commit review issue bug failing passing import class method field type string "
    "number list dict loop index count size limit start end step data buffer queue thread lock"
).split()
_NAMES = "engine scheduler cache radix loader parser server metrics router expert sampler tokenizer".split()
_VERBS = "compute handle build apply reset merge split flush check render select".split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def prose(rng: random.Random, sentences: int, lo: int = 6, hi: int = 14) -> str:
    return " ".join(words(rng, rng.randint(lo, hi)).capitalize() + "." for _ in range(sentences))


def thinking(rng: random.Random, n_words: int) -> str:
    """A reasoning paragraph of about ``n_words`` words."""
    out, left = [], n_words
    while left > 0:
        k = min(left, rng.randint(8, 16))
        out.append(words(rng, k).capitalize() + ".")
        left -= k
    return " ".join(out)


def path(rng: random.Random) -> str:
    return f"src/{rng.choice(_NAMES)}/{rng.choice(_NAMES)}_{rng.choice(_VERBS)}.py"


def source_file(rng: random.Random, n_lines: int) -> str:
    """Python-looking source of ``n_lines`` lines."""
    lines = [f"import {rng.choice(_NAMES)}", ""]
    while len(lines) < n_lines:
        fn = f"{rng.choice(_VERBS)}_{rng.choice(_NAMES)}"
        lines.append(f"def {fn}({rng.choice(_WORDS)}, {rng.choice(_WORDS)}=None):")
        lines.append(f'    """{words(rng, rng.randint(4, 9)).capitalize()}."""')
        for _ in range(rng.randint(2, 6)):
            lines.append(
                f"    {rng.choice(_WORDS)} = {rng.choice(_NAMES)}.{rng.choice(_VERBS)}({rng.choice(_WORDS)})"
            )
        lines.append(f"    return {rng.choice(_WORDS)}")
        lines.append("")
    return "\n".join(lines[:n_lines])


def command_output(rng: random.Random, n_lines: int) -> str:
    """Test-runner / grep-like output of ``n_lines`` lines."""
    kinds = [
        lambda: f"{path(rng)}:{rng.randint(1, 400)}: {words(rng, rng.randint(3, 8))}",
        lambda: (
            f"tests/test_{rng.choice(_NAMES)}.py::test_{rng.choice(_VERBS)}_{rng.choice(_NAMES)} "
            f"{rng.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED'])}"
        ),
        lambda: f"E   AssertionError: {words(rng, rng.randint(3, 7))}",
    ]
    return "\n".join(rng.choice(kinds)() for _ in range(n_lines))
