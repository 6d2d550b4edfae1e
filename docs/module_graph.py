"""The modules of rms_retrieval and their imports, read from the source with `ast`.

`python docs/module_graph.py` rewrites docs/modules.md from the code; `--check` only reports
whether the committed file is current (exit 1 if not). The layer rules are checked here too:
imports point dataflows -> nodes -> stores, never back up, nothing in nodes/ imports duckdb or
faiss, and no modules import each other in a cycle, counting imports inside functions and the
lazy `import_module("rms_retrieval....")` of a module that names its targets as strings (the root
package, the CLI's command table). Standard library only, so any Python 3.11 runs it before the
project is installed.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIAGRAM = Path("docs") / "modules.md"  # under the repository root
PACKAGE = "rms_retrieval"
# Lower layers may be imported by higher ones, never the other way round.
LAYERS = {f"{PACKAGE}.stores": 0, f"{PACKAGE}.nodes": 1, f"{PACKAGE}.dataflows": 2}
FORBIDDEN_IN_NODES = frozenset({"duckdb", "faiss"})


@dataclass(frozen=True, order=True)
class Import:
    """`source` imports `target`; `deferred` when the import statement sits inside a function;
    `typing_only` when it sits under `if TYPE_CHECKING:` (it never runs, so it makes no cycle)."""

    source: str
    target: str
    deferred: bool
    typing_only: bool = False


@dataclass(frozen=True)
class ModuleGraph:
    modules: tuple[str, ...]
    packages: frozenset[str]  # the modules that are a folder's __init__.py
    imports: tuple[Import, ...]  # between modules of the package
    external: Mapping[str, frozenset[str]]  # module -> top-level names of other distributions


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Each sub-package's folder, as pyproject.toml maps them."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {package: root / folder for package, folder in mapping.items()}


def _modules(dirs: Mapping[str, Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            # A nested folder mapped on its own (dataflows/bench) is found from its parent too.
            found.setdefault(name, path)
    return found


def _typing_only_nodes(tree: ast.Module) -> set[int]:
    """The ids of every AST node under an `if TYPE_CHECKING:` block."""
    return {id(inner) for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for statement in node.body for inner in ast.walk(statement)}


def _imported(tree: ast.Module, module: str, is_package: bool,
              modules: Mapping[str, Path]) -> Iterable[tuple[str, bool, bool]]:
    """(what, deferred, typing_only) per import: a module of the package, or another distribution's top-level name.

    `from package import name` depends on `package.name` when that is a module, else on `package`.
    An import is deferred when its statement sits inside a function, typing-only when it sits
    under `if TYPE_CHECKING:`. A module that calls
    `import_module` depends, deferred, on every module of the package it names in a string.
    """
    deferred_nodes = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    typing_nodes = _typing_only_nodes(tree)
    for node in ast.walk(tree):
        deferred, typing = id(node) in deferred_nodes, id(node) in typing_nodes
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _known_prefix(alias.name, modules) or alias.name.split(".")[0], deferred, typing
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                dotted = f"{base}.{alias.name}"
                yield (dotted if dotted in modules else _known_prefix(base, modules) or base.split(".")[0]), deferred, typing
    calls = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
             for node in ast.walk(tree) if isinstance(node, ast.Call)}
    if "import_module" in calls:
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
                yield node.value, True, False


def module_graph(root: Path = ROOT) -> ModuleGraph:
    """Every module of the package and every import between them, from the source files."""
    modules = _modules(package_dirs(root))
    imports: list[Import] = []
    external: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        deferred_only: dict[str, bool] = {}
        typing_only: dict[str, bool] = {}
        for target, deferred, typing in _imported(tree, name, path.name == "__init__.py", modules):
            deferred_only[target] = deferred_only.get(target, True) and deferred
            typing_only[target] = typing_only.get(target, True) and typing
        imports += [Import(name, target, deferred, typing_only[target]) for target, deferred in deferred_only.items()
                    if target in modules and target != name]
        external[name] = frozenset(target for target in deferred_only if target not in modules) - {"__future__"}
    packages = frozenset(name for name, path in modules.items() if path.name == "__init__.py")
    return ModuleGraph(tuple(sorted(modules)), packages, tuple(sorted(imports)), external)


def _known_prefix(dotted: str, modules: Mapping[str, Path]) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def layer_of(module: str) -> str | None:
    """The layer package a module belongs to (`rms_retrieval.nodes`), or None for the root."""
    for package in LAYERS:
        if module == package or module.startswith(package + "."):
            return package
    return None


def violations(graph: ModuleGraph) -> list[str]:
    """Imports that point up the layers, duckdb or faiss imported in nodes/, and import cycles, one line each."""
    found = []
    for edge in graph.imports:
        source, target = layer_of(edge.source), layer_of(edge.target)
        if source and target and LAYERS[target] > LAYERS[source]:
            found.append(f"{edge.source} imports {edge.target}: {source} must not import {target}")
    for module, names in graph.external.items():
        if layer_of(module) == f"{PACKAGE}.nodes":
            found += [f"{module} imports {name}: nodes/ stays free of storage engines"
                      for name in sorted(names & FORBIDDEN_IN_NODES)]
    found += [f"import cycle: {', '.join(group)} import each other (imports inside functions count)"
              for group in cycles(graph)]
    return found


def cycles(graph: ModuleGraph) -> list[tuple[str, ...]]:
    """Every group of modules that import each other in a cycle (Tarjan's strongly connected
    components over every import that runs, deferred ones included), each group sorted, groups in order."""
    targets: dict[str, list[str]] = {}
    for edge in graph.imports:
        if not edge.typing_only:
            targets.setdefault(edge.source, []).append(edge.target)
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for target in targets.get(module, ()):
            if target not in index:
                visit(target)
                lowest[module] = min(lowest[module], lowest[target])
            elif target in stack:
                lowest[module] = min(lowest[module], index[target])
        if lowest[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(tuple(sorted(group)))

    for module in graph.modules:
        if module not in index:
            visit(module)
    return sorted(found)


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".") or PACKAGE


def _node_id(module: str) -> str:
    return _short(module).replace(".", "_")


def render(graph: ModuleGraph) -> str:
    """docs/modules.md: the layers, then every module and import, as Mermaid diagrams."""
    package_edges: dict[tuple[str, str], int] = {}
    for edge in graph.imports:
        key = (layer_of(edge.source) or PACKAGE, layer_of(edge.target) or PACKAGE)
        if key[0] != key[1]:
            package_edges[key] = package_edges.get(key, 0) + 1
    lines = [
        "# Modules and imports",
        "",
        "Generated from the source by `python docs/module_graph.py` (run it after changing imports;",
        "`tests/test_module_graph.py` fails while this file is stale or an import points up the layers).",
        "Imports point dataflows → nodes → stores; nothing in `nodes/` imports duckdb or faiss.",
        "",
        "## Layers",
        "",
        "Each arrow: how many module-to-module imports go that way.",
        "",
        "```mermaid",
        "flowchart TD",
    ]
    lines += [f"    {_node_id(a)}[{_short(a)}] -->|{n}| {_node_id(b)}[{_short(b)}]"
              for (a, b), n in sorted(package_edges.items())]
    lines += [
        "```",
        "",
        "## Modules",
        "",
        "A solid arrow is a module-level import; a dotted one is an import inside a function body.",
        "",
        "```mermaid",
        "flowchart LR",
    ]
    # An __init__.py that nobody imports and that imports nothing is only a folder: left out.
    linked = {module for edge in graph.imports for module in (edge.source, edge.target)}
    shown = [module for module in graph.modules if module not in graph.packages or module in linked]
    groups: dict[str, list[str]] = {}
    for module in shown:
        groups.setdefault(module if module in graph.packages else module.rpartition(".")[0], []).append(module)
    for group, members in sorted(groups.items()):
        lines.append(f"    subgraph {_node_id(group)}_modules[{_short(group)}]")
        lines += [f"        {_node_id(m)}[{_short(m).rpartition('.')[2]}]" for m in members]
        lines.append("    end")
    for edge in graph.imports:
        arrow = "-.->" if edge.deferred else "-->"
        lines.append(f"    {_node_id(edge.source)} {arrow} {_node_id(edge.target)}")
    lines += ["```", "", "## Imports, as text", ""]
    for module in shown:
        targets = [("(in a function) " if e.deferred else "") + _short(e.target)
                   for e in graph.imports if e.source == module]
        lines.append(f"- `{_short(module)}` → " + (", ".join(targets) if targets else "nothing in the package"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/modules.md is stale; write nothing")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this file's)")
    args = parser.parse_args(argv)
    graph = module_graph(args.root)
    problems = violations(graph)
    for problem in problems:
        print(f"layer rule broken: {problem}", file=sys.stderr)
    text, path = render(graph), args.root / DIAGRAM
    if args.check:
        current = path.exists() and path.read_text() == text
        if not current:
            print(f"{DIAGRAM} is stale: run python docs/module_graph.py", file=sys.stderr)
        return 0 if current and not problems else 1
    path.write_text(text)
    print(f"wrote {DIAGRAM}: {len(graph.modules)} modules, {len(graph.imports)} imports")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
