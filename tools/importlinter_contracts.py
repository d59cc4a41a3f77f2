"""Custom import-linter contract: private names do not cross packages.

import-linter's own ``private_modules`` contract covers modules (``mercer.linalg._eig`` may be
imported only from within ``mercer.linalg``); the import graph it works on knows modules, not
names, so ``from mercer.linalg import _helper`` (a private function re-exported by a package, or
defined in its ``__init__``) needs a look at the source. This contract reads every module of the
graph with :mod:`ast` and applies the same rule to names:

    ``from X import _name`` (``_name`` not itself a module) is allowed only in modules inside the
    package that owns ``X`` (``X`` if ``X`` is a package, else the package containing ``X``).

So ``mercer._validation`` (owned by ``mercer``) lends ``_name`` to every module, while
``from ..gp._exact import _GaussianLML`` in ``mercer.models.ridge`` is refused (owned by ``mercer.models.gp``).
Dunder names (``__version__``) are public.  Registered in ``pyproject.toml``::

    contract_types = ["private_names: tools.importlinter_contracts.PrivateNamesContract"]
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.application.contract_utils import AlertLevel


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _source_path(module: str, root_dir: Path) -> Path | None:
    """File of ``module`` under the root package directory (``root_dir`` is ``.../mercer``)."""
    parts = module.split(".")[1:]
    base = root_dir.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module name of ``from <node.module> import ...`` written in ``importer``."""
    if not node.level:
        return node.module or ""
    package = importer if is_package else importer.rpartition(".")[0]
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(module: str, packages: set[str]) -> str:
    """The package a name defined in ``module`` belongs to."""
    return module if module in packages else module.rpartition(".")[0]


def _module_paths(graph: grimp.ImportGraph) -> dict[str, Path]:
    """Source file of every module of the graph's root packages (found without importing them)."""
    paths = {}
    for root in sorted(m for m in graph.modules if "." not in m):
        spec = importlib.util.find_spec(root)  # a top-level spec: nothing gets imported
        if spec is None or not spec.submodule_search_locations:
            continue
        root_dir = Path(list(spec.submodule_search_locations)[0])
        for module in graph.modules:
            path = _source_path(module, root_dir) if module.split(".")[0] == root else None
            if path is not None:
                paths[module] = path
    return paths


def _violations(module: str, path: Path, graph: grimp.ImportGraph, packages: set[str]) -> list[dict]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _absolute(node, module, module in packages)
        if source not in graph.modules:  # an external package
            continue
        owner = _owner(source, packages)
        if module == owner or module.startswith(owner + "."):
            continue
        for alias in node.names:
            if _is_private(alias.name) and f"{source}.{alias.name}" not in graph.modules:
                found.append({"importer": module, "imported": f"{source}.{alias.name}", "line_number": node.lineno})
    return found


class PrivateNamesContract(Contract):
    """``from pkg.mod import _name`` only from within the package that owns ``pkg.mod``.

    Configuration options:

        - ignore_imports: names to let through, written ``importer -> module._name``. (Optional.)
        - unmatched_ignore_imports_alerting: "none", "warn" or "error" (default) for an entry of
          ignore_imports that matches nothing, as in import-linter's own contracts.
    """

    type_name = "private_names"

    ignore_imports = fields.SetField(subfield=fields.StringField(), required=False)
    unmatched_ignore_imports_alerting = fields.EnumField(AlertLevel, default=AlertLevel.ERROR)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        ignored = {tuple(part.strip() for part in item.split("->")) for item in self.ignore_imports or ()}
        paths = _module_paths(graph)
        packages = {m for m, path in paths.items() if path.name == "__init__.py"}
        found = [v for module in sorted(paths) for v in _violations(module, paths[module], graph, packages)]
        broken = [v for v in found if (v["importer"], v["imported"]) not in ignored]
        unmatched = sorted(ignored - {(v["importer"], v["imported"]) for v in found})
        level = self.unmatched_ignore_imports_alerting
        return ContractCheck(
            kept=not broken and not (unmatched and level is AlertLevel.ERROR),
            warnings=[f"No matches for ignored import {a} -> {b}." for a, b in unmatched] if level is AlertLevel.WARN
            else [],
            metadata={"illegal_imports": broken, "unmatched": unmatched if level is AlertLevel.ERROR else []},
            ignored_import_count=len(found) - len(broken))

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private names may only be imported from within the package that owns them:",
                           bold=False)
        output.new_line()
        for v in check.metadata["illegal_imports"]:
            output.print_error(f"- {v['importer']} -> {v['imported']} (l.{v['line_number']})", bold=False)
            output.new_line()
        for importer, imported in check.metadata["unmatched"]:
            output.print_error(f"No matches for ignored import {importer} -> {imported}.", bold=False)
            output.new_line()
