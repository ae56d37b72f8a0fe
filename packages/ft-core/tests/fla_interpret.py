"""Test support: run flash-linear-attention's Triton kernels on the CPU under Triton's interpreter.

Use in a fresh process with TRITON_INTERPRET=1 in the environment before triton or fla is imported
(kernels are wrapped for the interpreter when they are decorated), then call ``patch()`` before the
first kernel launch. fla kernels run in float32 only here: the interpreter's bfloat16 is broken.

Two patches of Triton internals, checked with triton 3.9.0 and fla-core 0.6.0 (re-check on upgrades;
they touch private classes, and a Triton release may fix either gap):
1. ``Autotuner.prune_configs`` keeps the first config only. fla autotunes most kernels; with more than
   one config the autotuner benchmarks them through the active GPU driver, which does not exist on a
   CPU-only machine. With one config it skips benchmarking (as for single-config kernels).
2. ``interpreter.ASTTransformer.visit_For``: the interpreter runs ``for i in range(n)`` as a Python
   loop whose variable is a plain int, so ``i.to(tl.int64)`` (fla's chunk_delta_h kernels) fails.
   When a loop body calls ``.to`` on the loop variable, the rewritten body first turns the variable
   into an interpreter tensor, as the interpreter already does for assignments.
"""

from __future__ import annotations

import ast
import os


def patch() -> None:
    """Apply both patches (idempotent). Needs TRITON_INTERPRET=1 set before triton was imported."""
    assert os.environ.get("TRITON_INTERPRET") == "1", (
        "set TRITON_INTERPRET=1 before importing triton"
    )
    from triton.runtime import autotuner, interpreter

    if getattr(autotuner.Autotuner.prune_configs, "_ft_first_only", False):
        return
    prune = autotuner.Autotuner.prune_configs

    def first_config_only(self, kwargs, *args, **kw):
        return prune(self, kwargs, *args, **kw)[:1]

    first_config_only._ft_first_only = True
    autotuner.Autotuner.prune_configs = first_config_only
    interpreter.ASTTransformer.visit_For = _visit_for


def _calls_to_on(name: str, body: list[ast.stmt]) -> bool:
    """Whether ``name.to(...)`` appears anywhere in ``body``."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "to"
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        for stmt in body
        for n in ast.walk(stmt)
    )


def _visit_for(self, node: ast.For) -> ast.For:
    node = self.generic_visit(node)
    if isinstance(node.target, ast.Name) and _calls_to_on(node.target.id, node.body):
        name = node.target.id
        to_tensor = ast.Attribute(
            value=ast.Name(id="interpreter_semantic", ctx=ast.Load()),
            attr="to_tensor",
            ctx=ast.Load(),
        )
        rebind = ast.Assign(
            targets=[ast.Name(id=name, ctx=ast.Store())],
            value=ast.Call(
                func=to_tensor,
                args=[ast.Name(id=name, ctx=ast.Load()), ast.Constant(value=False)],
                keywords=[],
            ),
        )
        node.body.insert(0, ast.copy_location(rebind, node.body[0]))
    return node
