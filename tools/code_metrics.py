"""Structural metrics quoted in the execution-core issue: block loops outside ``linalg/``,
functions over 60 lines, function-local imports, validation helpers.

    python tools/code_metrics.py [--list]
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


def main(argv: list[str]) -> int:
    show = "--list" in argv
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
