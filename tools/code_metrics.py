"""Structural metrics quoted in the execution-core issue: block loops outside ``linalg/``,
functions over 60 lines, function-local imports; and what the execution core keeps out of the
estimators: operator type tests and byte arithmetic in ``models/``, block-size constants outside
``linalg/``.

    python tools/code_metrics.py [--list] [--check]

``--check`` exits 1 when ``models/`` tests an operator's type or does byte arithmetic, or a
block-size constant lives outside ``linalg/`` (``tests/test_layers.py`` runs it).
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "src" / "mercer"
MAX_LINES = 60


def _is_block_loop(node: ast.AST) -> bool:
    """``for ... in range(start, stop, step)`` with a non-constant step: a loop over blocks."""
    it = node.iter if isinstance(node, (ast.For, ast.comprehension)) else None
    return (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
            and len(it.args) == 3 and not isinstance(it.args[2], ast.Constant))


def _is_size_literal(node: ast.AST) -> bool:
    """``c << k`` or ``2 ** k`` with constants ``c`` and ``k`` of 10..30: a byte size (KiB to GiB;
    not a bit operation on a variable, not a seed's ``2**31``)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant) and isinstance(node.left, ast.Constant)):
        return False
    k = node.right.value
    if not isinstance(k, int) or not 10 <= k <= 30:
        return False
    return isinstance(node.op, ast.LShift) or (isinstance(node.op, ast.Pow) and node.left.value == 2)


def _names(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _is_budget_arithmetic(node: ast.AST) -> bool:
    """``budget - x``, ``budget // 4``, ``x * budget`` ...: a memory budget split by hand."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Sub, ast.FloorDiv, ast.Div, ast.Mult, ast.Add)):
        return False
    return any("budget" in _names(side).lower() for side in (node.left, node.right))


def _is_operator_type_test(node: ast.AST) -> bool:
    """``isinstance(x, SomethingOperator)`` (or a tuple naming one)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2):
        return False
    kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
    return any(_names(k).endswith("Operator") for k in kinds)


def _is_size_constant(node: ast.AST) -> bool:
    """A module-level ``NAME_BYTES = ...`` (``_TILE_BYTES = 64 * 2**20``): a size in bytes."""
    return (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and "BYTES" in node.targets[0].id)


def core_violations() -> tuple[list[str], list[str], list[str]]:
    """(operator type tests in models/, byte arithmetic in models/, block-size constants outside linalg/)."""
    type_tests, arithmetic, constants = [], [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text())
        if rel.parts[0] != "linalg":
            constants += [f"{rel}:{node.lineno} {node.targets[0].id}" for node in tree.body if _is_size_constant(node)]
        if rel.parts[0] != "models":
            continue
        for node in ast.walk(tree):
            if _is_operator_type_test(node):
                type_tests.append(f"{rel}:{node.lineno}")
            if _is_size_literal(node) or _is_budget_arithmetic(node):
                arithmetic.append(f"{rel}:{node.lineno}")
    return type_tests, arithmetic, constants


def main(argv: list[str]) -> int:
    show = "--list" in argv
    type_tests, arithmetic, constants = core_violations()
    for label, items in (("operator type tests in models/", type_tests),
                         ("byte arithmetic in models/ (<< k, 2**k, budget +-*/)", arithmetic),
                         ("block-size constants outside linalg/", constants)):
        print(f"{label}: {len(items)}")
        if items and (show or "--check" in argv):
            print("  " + "\n  ".join(items))
    if "--check" in argv:
        return 1 if type_tests or arithmetic or constants else 0
    loops, long_funcs, local_imports = [], [], []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if _is_block_loop(node) and rel.parts[0] != "linalg":
                loops.append(f"{rel}:{getattr(node, 'lineno', getattr(node.iter, 'lineno', 0))}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long_funcs.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        local_imports.append(f"{rel}:{sub.lineno}")
    print(f"block loops outside linalg/: {len(loops)}")
    if show:
        print("  " + "\n  ".join(loops))
    print(f"functions over {MAX_LINES} lines: {len(long_funcs)}")
    if show:
        print("  " + "\n  ".join(long_funcs))
    print(f"function-local imports: {len(local_imports)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
