"""The package's layers, read from the source: dependencies point only down, there are no import
cycles, pymilvus is imported only under ``storage/``, ``core/`` has no LlamaIndex, and no module
or function outgrows the size limits (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_rag_pack"
ROOT = "llama_index_rag_pack"

# Bottom to top: a module may import its own layer and the layers below it, never above.
LAYERS = ("core", "components", "storage", "pack", "evaluation", "cli")
# The package root's public facades sit on top of everything.
FACADES = {ROOT, f"{ROOT}.testing"}

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (for ``from x import y``: x.y when that is a module, else x)
    line: int


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level + (1 if MODULES[module].name == "__init__.py" else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _imports() -> Iterator[Import]:
    """Every import in the package, at module level or inside functions (a lazy import is still
    a dependency)."""
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(module, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    yield Import(module, full if full in MODULES else base, node.lineno)


IMPORTS = list(_imports())


def _layer(module: str) -> int:
    if module in FACADES:
        return len(LAYERS)
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        raise AssertionError(f"{module} sits outside the layers {LAYERS}; move it into one")
    return LAYERS.index(parts[1])


def test_every_module_belongs_to_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_no_upward_imports() -> None:
    upward = [
        f"{i.source}:{i.line} imports {i.target} "
        f"({LAYERS[_layer(i.source)]} -> {(LAYERS + ('facade',))[_layer(i.target)]})"
        for i in IMPORTS
        if i.target.startswith(ROOT) and _layer(i.target) > _layer(i.source)
    ]
    assert upward == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _module_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in IMPORTS:
        if i.target in MODULES and i.target != i.source:
            edges[i.source].add(i.target)
    return edges


def test_no_import_cycles() -> None:
    assert _cycles(_module_edges()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    ("library", "allowed"),
    [("pymilvus", ("storage",)), ("milvus_lite", ("storage",))],
)
def test_milvus_is_reached_only_through_storage(library: str, allowed: tuple[str, ...]) -> None:
    outside = [
        f"{i.source}:{i.line}"
        for i in IMPORTS
        if i.target.split(".")[0] == library and i.source.split(".")[1:2] != list(allowed)
    ]
    assert outside == []


# No LlamaIndex import is allowed in core (core.llm_output reads LLM JSON as core's
# parse_json_markdown does, but with a YAML loader that refuses aliases: it cannot call it).
CORE_LLAMA_INDEX_ALLOWLIST: set[tuple[str, str]] = set()


def test_core_is_pure() -> None:
    """No LlamaIndex classes and no package module above core in ``core/``."""
    impure = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in IMPORTS
        if i.source.startswith(f"{ROOT}.core")
        and (
            (
                i.target.startswith("llama_index.")
                and (i.source, i.target) not in CORE_LLAMA_INDEX_ALLOWLIST
            )
            or i.target.startswith("pymilvus")
            or (i.target.startswith(ROOT) and not i.target.startswith(f"{ROOT}.core"))
        )
    ]
    assert impure == []


def _is_template(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign | ast.AnnAssign | ast.Expr) and isinstance(
        node.value, ast.Constant | ast.JoinedStr
    )


def _function_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function body, its docstring and string constants (prompt templates) not
    counted."""
    lines = set()
    for stmt in fn.body:
        if _is_template(stmt):
            continue
        lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return len(lines)


def test_modules_stay_under_the_size_limit() -> None:
    too_long = {
        m: n
        for m, p in MODULES.items()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these modules (limit {MAX_MODULE_LINES} lines): {too_long}"


def test_functions_stay_under_the_size_limit() -> None:
    too_long = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = _function_lines(node)
                if n > MAX_FUNCTION_LINES:
                    too_long[f"{module}.{node.name}:{node.lineno}"] = n
    assert too_long == {}, f"split these functions (limit {MAX_FUNCTION_LINES}): {too_long}"


def test_the_public_names_stay_importable_from_the_root() -> None:
    import llama_index_rag_pack as pkg

    missing = [name for name in pkg.__all__ if not hasattr(pkg, name)]
    assert missing == []


def test_the_root_lists_each_public_name_once_in_each_table() -> None:
    import llama_index_rag_pack as pkg

    assert sorted(pkg.__all__) == sorted([*pkg._EXPORTS, "__version__"])
    assert len(pkg.__all__) == len(set(pkg.__all__))


def test_from_sources_works_after_importing_only_the_rag_pack_module() -> None:
    """No pack module sets a class attribute of another: ``RagPack.from_sources`` needs nothing
    but its own module imported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from llama_index_rag_pack.pack.rag_pack import RagPack\n"
        "assert 'llama_index_rag_pack.pack.routed' not in sys.modules\n"
        "try:\n"
        "    RagPack.from_sources([])\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "print('routed loaded:', 'llama_index_rag_pack.pack.routed' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "routed loaded: True" in done.stdout
    assert "ConfigurationError" in done.stdout, done.stdout  # RoutedRagPack's own check ran


def _sync_async_twins() -> Iterator[tuple[str, Any, Any]]:
    """``(where, sync, async)`` for every ``name``/``aname`` pair a module or class of the
    package defines itself (functions and methods, classmethods included)."""
    import importlib
    import inspect

    def function(obj: Any) -> Any:
        return obj.__func__ if isinstance(obj, classmethod | staticmethod) else obj

    for module_name in sorted(_modules()):
        module = importlib.import_module(module_name)
        scopes = [(module_name, vars(module))] + [
            (f"{module_name}.{cls.__name__}", vars(cls))
            for cls in vars(module).values()
            if inspect.isclass(cls) and cls.__module__ == module_name
        ]
        for where, namespace in scopes:
            for name, obj in namespace.items():
                twin = function(obj)
                sync = function(namespace.get(name[1:])) if name.startswith("a") else None
                if (
                    inspect.isfunction(twin)
                    and inspect.isfunction(sync)
                    and twin.__module__ == module_name
                ):
                    yield f"{where}.{name}", sync, twin


def test_async_twins_take_exactly_the_parameters_of_their_sync_twin() -> None:
    """A public ``aX`` restates ``X``'s parameters: they must not drift apart (names, kinds and
    defaults; annotations may differ, e.g. ``Iterable`` and ``AsyncIterable``)."""
    import inspect

    def parameters(fn: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    twins = {where: (sync, twin) for where, sync, twin in _sync_async_twins()}
    assert {
        "llama_index_rag_pack.components.fusion_queries.agenerate_queries",
        "llama_index_rag_pack.storage.raptor_retriever.RaptorRetriever.afrom_documents",
        "llama_index_rag_pack.pack.rag_pack.RagPack.arun",
    } <= set(twins)
    drifted = {
        where: (str(inspect.signature(sync)), str(inspect.signature(twin)))
        for where, (sync, twin) in twins.items()
        if parameters(sync) != parameters(twin)
    }
    assert not drifted, drifted
