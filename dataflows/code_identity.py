"""Which code answered a request: the package version and a fingerprint of every module a bundle
depends on.

The modules are found from the imports, not from a list kept by hand: starting at the modules
`retrieve()` names (itself, and the module of the store class that answered), every import of a
module of the package is followed, at module level and inside functions alike, so a change in a helper such as `nodes/helpers/temporal.py` or `stores/indexes/lexical.py`
changes the fingerprint. Replay and what-if compare it with the logged one to tell a code change
from a settings or a store change.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = "rms_retrieval"
# `from X import a, b` (names possibly in parentheses over several lines) or `import X, Y as Z`,
# at the start of a line, indented or not.
_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)|import[ \t]+([^\n#]*))",
                          re.MULTILINE)


@lru_cache(maxsize=1)
def package_version() -> str:
    """The installed version, looked up once per process (a metadata lookup costs about 0.7 ms)."""
    try:
        return version("rms-retrieval")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+source"


@lru_cache(maxsize=None)
def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The module's spec, found without importing it: only its parent packages are imported
    (their `__init__.py` files are cheap), never a module that may import torch."""
    parent = name.rpartition(".")[0]
    if parent:
        parent_spec = _spec(parent)
        if parent_spec is None or parent_spec.submodule_search_locations is None:
            return None  # `package.module.name`: a name inside a module, not a module
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # `__main__`, or a module that cannot be found
        return None


def _source_file(module: str) -> Path | None:
    """The file a module is loaded from, or None (not a module, or not loaded from a file)."""
    spec = _spec(module)
    if spec is None or not spec.has_location or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every dotted name an import statement of the module names, at module level or indented in a
    function.

    `from package import name` yields `package` and `package.name` (`_package_modules` keeps the
    ones that are modules); a relative import is resolved against the module's package. Lines
    are matched in the source text rather than parsed (43 modules: 25 ms against a second for
    `ast`, on the first logged request of every process); a docstring line that reads like an
    import can only add a module to the fingerprint, never lose one.
    """
    is_package = path.name == "__init__.py"
    for match in _IMPORT_LINE.finditer(path.read_text()):
        base, names, plain = match.groups()
        if plain is not None:
            yield from (part.split()[0] for part in plain.split(",") if part.strip())
            continue
        level = len(base) - len(base.lstrip("."))
        base = base[level:]
        if level:
            anchor = module.split(".")
            anchor = anchor[: len(anchor) - level + (1 if is_package else 0)]
            base = ".".join([*anchor, base] if base else anchor)
        yield base
        yield from (f"{base}.{part.split()[0]}" for part in names.strip("()").split(",") if part.strip())


def _package_modules(names: Iterable[str], package: str) -> set[str]:
    """The names that are modules of `package`, with the packages above them (importing
    `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` too)."""
    parts = (name.split(".") for name in names if name == package or name.startswith(package + "."))
    return {name for dotted in parts for end in range(1, len(dotted) + 1)
            if _source_file(name := ".".join(dotted[:end]))}


def dependency_modules(roots: Iterable[str], package: str = PACKAGE) -> tuple[str, ...]:
    """`roots` and every module of `package` they import, directly or not, sorted by name."""
    found: set[str] = set()
    pending = [name for name in roots if _source_file(name)]
    while pending:
        module = pending.pop()
        if module in found:
            continue
        found.add(module)
        pending += _package_modules(_imported_names(module, _source_file(module)), package) - found
    return tuple(sorted(found))


def code_fingerprint(roots: Iterable[str], package: str = PACKAGE) -> str:
    """sha256 over the source of `dependency_modules(roots, package)`: changes when any of that code does."""
    digest = hashlib.sha256()
    for module in dependency_modules(roots, package):
        digest.update(module.encode() + b"\0" + _source_file(module).read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=16)
def code_identity(roots: tuple[str, ...]) -> dict[str, str]:
    """The fields a log record carries to name the code that answered it, computed once per
    process for each set of roots (the code a process runs does not change under it)."""
    return {"package_version": package_version(), "dag_fingerprint": code_fingerprint(roots)}
