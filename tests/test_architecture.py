"""The package's feature packages, read from the source (docs/ARCHITECTURE.md): each package
imports only its own modules and those of the packages below it, there are no import cycles
(loads by name included), pymilvus is imported only under ``milvus/``, pure modules import neither
LlamaIndex nor pymilvus, ``core/`` holds only what several features share, no folder holds more
than 20 modules, and no module or function outgrows the size limits."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llama_index_rag_pack"
ROOT = "llama_index_rag_pack"

#: Each package's level: a module imports its own package and packages of lower levels only
#: (packages of one level never import each other). Read bottom to top as a question travels
#: the other way: cli -> pack -> a feature -> milvus, documents, models -> core.
LEVELS = {
    "core": 0,
    "models": 1,
    "documents": 1,
    "milvus": 2,
    "citations": 3,
    "fusion": 3,
    "raptor": 3,
    "rerank": 3,
    "chat": 4,
    "judge": 4,
    "routing": 4,
    "self_query": 4,
    "sql": 4,
    "pack": 5,
    "evaluation": 6,
    "serve": 6,
    "cli": 7,
}
# The package root's public facades sit on top of everything.
FACADES = {ROOT, f"{ROOT}.testing"}
#: Modules that load package modules by name (``importlib.import_module``): the root's lazy
#: public names and the CLI's subcommand table, both on top, so no load can close a cycle.
LOADS_BY_NAME = {ROOT, f"{ROOT}.cli.app"}
#: What a pure module says of itself, right after its docstring.
PURE_MARKER = "# Pure module: no LlamaIndex, no pymilvus"
#: The Milvus libraries, reached only through ``milvus/``.
MILVUS_LIBRARIES = ("pymilvus", "milvus_lite", "llama_index.vector_stores.milvus")

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_FOLDER_MODULES = 20


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


@functools.cache
def modules() -> dict[str, Path]:
    """The package's modules by dotted name (read when a test first asks: not at collection)."""
    return _modules()


@functools.cache
def sources() -> dict[str, str]:
    return {m: p.read_text(encoding="utf-8") for m, p in modules().items()}


@functools.cache
def trees() -> dict[str, ast.Module]:
    return {m: ast.parse(src) for m, src in sources().items()}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level + (1 if modules()[module].name == "__init__.py" else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _loaded_by_name(module: str, node: ast.Call) -> str | None:
    """The module an ``importlib.import_module("...")`` call loads (``None`` for another call
    or a name computed at run time)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if not isinstance(arg, ast.Constant) or not isinstance(arg.value, str):
        return None
    target = arg.value
    if target.startswith("."):  # relative to the package given second, the root's table
        target = ROOT + target
    return target


def _imports() -> Iterator[Import]:
    """Every import in the package, at module level or inside functions (a lazy import is still
    a dependency), and every module loaded by name."""
    for module, tree in trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(module, alias.name, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    yield Import(module, full if full in modules() else base, node.lineno)
            elif isinstance(node, ast.Call) and (target := _loaded_by_name(module, node)):
                yield Import(module, target, node.lineno)


@functools.cache
def imports() -> list[Import]:
    return list(_imports())


def _package(module: str) -> str:
    if module in FACADES:
        return "facade"
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LEVELS:
        raise AssertionError(f"{module} sits outside the packages {sorted(LEVELS)}; move it")
    return parts[1]


def _level(module: str) -> int:
    package = _package(module)
    return len(LEVELS) if package == "facade" else LEVELS[package]


def test_every_module_belongs_to_a_package() -> None:
    for module in modules():
        _package(module)


def test_packages_import_only_their_own_modules_and_those_below() -> None:
    wrong = [
        f"{i.source}:{i.line} imports {i.target} ({_package(i.source)} -> {_package(i.target)})"
        for i in imports()
        if i.target.startswith(ROOT)
        and i.target in modules()
        and _package(i.target) != _package(i.source)
        and _level(i.target) >= _level(i.source)
    ]
    assert wrong == []


def test_features_never_import_pack_cli_or_evaluation() -> None:
    features = {p for p, level in LEVELS.items() if 3 <= level <= 4}
    wrong = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports()
        if i.target in modules()
        and _package(i.source) in features
        and _package(i.target) in {"pack", "cli", "evaluation"}
    ]
    assert wrong == []


@pytest.mark.slow
def test_modules_are_loaded_by_name_only_from_the_top() -> None:
    calls = {  # (module, line, what it loads) of every load by name, each tree walked once
        (module, node.lineno, target)
        for module, tree in trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (target := _loaded_by_name(module, node))
    }
    by_name = sorted(
        {
            i.source
            for i in imports()
            if (i.source, i.line, i.target) in calls and i.target.startswith(ROOT)
        }
    )
    assert set(by_name) <= LOADS_BY_NAME, by_name


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
    edges: dict[str, set[str]] = {m: set() for m in modules()}
    for i in imports():
        if i.target in modules() and i.target != i.source:
            edges[i.source].add(i.target)
    return edges


def test_no_import_cycles() -> None:
    assert _cycles(_module_edges()) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("library", MILVUS_LIBRARIES)
def test_milvus_is_reached_only_through_the_milvus_package(library: str) -> None:
    outside = [
        f"{i.source}:{i.line}"
        for i in imports()
        if (i.target == library or i.target.startswith(f"{library}."))
        and _package(i.source) != "milvus"
    ]
    assert outside == []


@functools.cache
def pure() -> frozenset[str]:
    return frozenset(m for m, src in sources().items() if PURE_MARKER in src)


def test_pure_modules_import_neither_llama_index_nor_pymilvus_nor_an_impure_module() -> None:
    impure = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports()
        if i.source in pure()
        and (
            i.target.split(".")[0] in {"llama_index", "pymilvus", "milvus_lite"}
            or (
                i.target in modules()
                and i.target not in pure()
                and modules()[i.target].stem != "__init__"
            )
        )
    ]
    assert impure == []


def test_the_pure_marker_is_where_it_says_and_core_is_mostly_pure() -> None:
    assert len(pure()) >= 40  # the algorithm modules of every feature say so
    core = {m for m in modules() if _package(m) == "core" and modules()[m].stem != "__init__"}
    # core's LlamaIndex parts: where a query enters a retriever or engine, node tags, and the
    # usage meter and its handlers on LlamaIndex's instrumentation
    llama_index_parts = {"query_bases", "node_tags", "usage", "usage_events"}
    assert core - pure() == {f"{ROOT}.core.{name}" for name in llama_index_parts}


def test_core_holds_only_what_several_features_share() -> None:
    """Every core module is imported (directly, or through another core module) by modules of
    at least two other packages."""
    users: dict[str, set[str]] = {m: set() for m in modules() if _package(m) == "core"}
    for i in imports():
        if i.target in users and _package(i.source) not in {"core", "facade"}:
            users[i.target].add(_package(i.source))
    changed = True
    while changed:  # a core module used by another core module serves that one's users too
        changed = False
        for i in imports():
            if i.target in users and i.source in users and i.source != i.target:
                before = len(users[i.target])
                users[i.target] |= users[i.source]
                changed = changed or len(users[i.target]) != before
    lonely = {m: sorted(p) for m, p in users.items() if len(p) < 2 and m != f"{ROOT}.core"}
    assert lonely == {}, f"move these into the one package that uses them: {lonely}"


def test_no_folder_holds_more_than_twenty_modules() -> None:
    folders: dict[Path, int] = {}
    for path in modules().values():
        folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(p.relative_to(PACKAGE)): n for p, n in folders.items()}
    crowded = {p: n for p, n in crowded.items() if n > MAX_FOLDER_MODULES}
    assert crowded == {}


def test_the_cli_never_imports_the_milvus_door() -> None:
    reaches = [
        f"{i.source}:{i.line} imports {i.target}"
        for i in imports()
        if _package(i.source) == "cli" and i.target in modules() and _package(i.target) == "milvus"
    ]
    assert reaches == []


#: Private attributes of third-party classes the pack reaches, each because no public API
#: serves (docs/ARCHITECTURE.md lists them with the reason): (module, the expression's head).
THIRD_PARTY_REACHES = {
    (f"{ROOT}.documents.languages", "full._full_model"),  # py3langid: restrict a copy
    (f"{ROOT}.documents.languages", "source._full_model"),
    (f"{ROOT}.documents.languages", "ident._decide"),  # py3langid: raw log-probabilities
    (f"{ROOT}.fusion.rag_fusion", "type(retriever)._aretrieve"),  # core: is async native?
    (f"{ROOT}.fusion.rag_fusion", "BaseRetriever._aretrieve"),
    (f"{ROOT}.fusion.vector", "VectorIndexRetriever._retrieve"),  # the base's own search
    (f"{ROOT}.fusion.vector", "VectorIndexRetriever._aretrieve"),
    (f"{ROOT}.fusion.vector", "clone._kwargs"),  # VectorIndexRetriever's search kwargs
    (f"{ROOT}.self_query.metadata_filter", "retriever._vector_store"),
    (f"{ROOT}.self_query.metadata_filter", "retriever._kwargs"),
    (f"{ROOT}.self_query.metadata_filter", "out._kwargs"),
    (f"{ROOT}.milvus.connection", "store._milvusclient"),  # MilvusVectorStore's client
    (f"{ROOT}.milvus.index_creation", "store._add_dense_index_params"),
    (f"{ROOT}.milvus.index_creation", "store._add_sparse_index_params"),
    (f"{ROOT}.milvus.tenants", "base._add_fields_to_schema"),
    (f"{ROOT}.models.local_embedding", "self._torch_model()._get_text_embeddings"),
    (f"{ROOT}.citations.cited_query_engine", "getattr(retriever, '_embed_model')"),
    (f"{ROOT}.milvus.lite", "getattr(server_manager_instance, '_servers')"),
    (f"{ROOT}.milvus.lite", "getattr(client, '_config')"),  # the copies read Lite's rows
    (f"{ROOT}.milvus.lite", "collection._read_snapshot"),
    (f"{ROOT}.milvus.lite", "collection._wait_for_bg"),  # Lite's background merge, drained
    # Lite's flush, and its row check
    (f"{ROOT}.milvus.lite_engine.fast_paths", "getattr(MemTable, '_build_data_table')"),
    (f"{ROOT}.milvus.lite_engine.fast_paths", "MemTable._build_data_table"),
    (f"{ROOT}.milvus.lite_engine.fast_paths", "memtable._data_schema"),
    (f"{ROOT}.milvus.lite_engine.fast_paths", "memtable._insert_batches"),
    (f"{ROOT}.milvus.lite_engine.fast_paths", "getattr(validation, '_find_float_vector')"),
    (f"{ROOT}.milvus.lite", "collection._memtable"),
    (f"{ROOT}.milvus.lite", "collection._vector_name"),
    (f"{ROOT}.milvus.client_open", "getattr(helper, '_ROW_SCALAR_NORMALIZERS')"),
    (f"{ROOT}.models.settings", "getattr(Settings, '_llm')"),  # core: read without a default
    (f"{ROOT}.models.settings", "getattr(Settings, '_embed_model')"),
}


def _private_reaches() -> Iterator[tuple[str, str, int]]:
    """``(module, expression, line)`` for every private attribute (``_x``, not ``__x__``) read
    or written on something other than ``self``, ``cls`` or ``super()``, by attribute or by
    name (``getattr``/``setattr``/``hasattr`` with a literal)."""

    def own(value: ast.expr) -> bool:
        if isinstance(value, ast.Name) and value.id in {"self", "cls"}:
            return True
        return isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super"

    for module, tree in trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                attr, value = node.attr, node.value
                if attr.startswith("_") and not attr.startswith("__") and not own(value):
                    yield module, f"{ast.unparse(value)}.{attr}", node.lineno
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in {"getattr", "setattr", "hasattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and node.args[1].value.startswith("_")
                and not node.args[1].value.startswith("__")
                and not own(node.args[0])
            ):
                name = node.args[1].value
                yield module, f"{node.func.id}({ast.unparse(node.args[0])}, {name!r})", node.lineno


@pytest.mark.slow
def test_no_module_reaches_into_another_objects_private_attributes() -> None:
    reaches = [
        f"{module}:{line} {expression}"
        for module, expression, line in _private_reaches()
        if (module, expression) not in THIRD_PARTY_REACHES
    ]
    assert reaches == [], "add a method or property to the class instead"


@pytest.mark.slow
def test_each_third_party_reach_is_still_there_and_documented() -> None:
    found = {(module, expression) for module, expression, _ in _private_reaches()}
    assert found >= THIRD_PARTY_REACHES, THIRD_PARTY_REACHES - found
    architecture = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for _, expression in THIRD_PARTY_REACHES:
        attribute = expression.split("'")[1] if "'" in expression else expression.rsplit(".")[-1]
        assert f"`{attribute}`" in architecture, f"docs/ARCHITECTURE.md: say why {expression}"


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
        for m, p in modules().items()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these modules (limit {MAX_MODULE_LINES} lines): {too_long}"


@pytest.mark.slow
def test_functions_stay_under_the_size_limit() -> None:
    too_long = {}
    for module, path in modules().items():
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


@pytest.mark.slow
def test_from_sources_works_after_importing_only_the_rag_pack_module() -> None:
    """``RagPack.from_sources`` needs nothing but its own module imported, and no module is
    loaded by name for it (``RoutedRagPack`` shares ``RagPackBase`` instead of subclassing
    ``RagPack``, so the two modules do not import each other)."""
    import subprocess
    import sys

    code = (
        "from llama_index_rag_pack.pack.rag_pack import RagPack\n"
        "from llama_index_rag_pack.pack.routed import RoutedRagPack\n"
        "try:\n"
        "    RagPack.from_sources([])\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
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
        "llama_index_rag_pack.fusion.fusion_queries.agenerate_queries",
        "llama_index_rag_pack.raptor.raptor_retriever.RaptorRetriever.afrom_documents",
        "llama_index_rag_pack.pack.pack_base.RagPackBase.arun",
    } <= set(twins)
    drifted = {
        where: (str(inspect.signature(sync)), str(inspect.signature(twin)))
        for where, (sync, twin) in twins.items()
        if parameters(sync) != parameters(twin)
    }
    assert not drifted, drifted
