"""The JSON artifacts the package saves and loads (saved routers, search trees, fusion configs,
field declarations, routes files, labelled sets, result caches): a failed save leaves the previous
file as it was, only regular files of a bounded size are read (a FIFO or a device is refused at
once, never waited on), and a damaged or foreign file is one ``ConfigurationError`` line naming
the file, never a traceback (the result cache, documented to, comes back empty instead)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.embeddings import MockEmbedding

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.cli.route import _labelled_queries
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import (
    parse_json,
    read_json_file,
    read_text_file,
    write_json_atomic,
    write_text_atomic,
)
from llama_index_rag_pack.evaluation.cache import ResultCache
from llama_index_rag_pack.evaluation.labelled import (
    LabelledExample,
    load_labelled_set,
    save_labelled_set,
)
from llama_index_rag_pack.fusion.fusion_config import (
    FusionConfig,
    load_fusion_config,
    save_fusion_config,
)
from llama_index_rag_pack.judge.judge_tree import JudgedChunk, SearchNode, SearchTree
from llama_index_rag_pack.milvus.metadata_fields import load_field_specs
from llama_index_rag_pack.pack.sources import load_sources
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector

DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000
posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")


def _one_line_error(call: Callable[[], Any], path: Path | str) -> str:
    """The message of the ``ConfigurationError`` ``call`` raises: one line that names ``path``."""
    with pytest.raises(ConfigurationError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    return message


# ------------------------------------------------------------------ the shared reader and writer
@posix_only
def test_a_fifo_or_device_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)  # no writer: reading it would wait forever
    assert "not a regular file" in _one_line_error(lambda: read_json_file(fifo, what="x"), fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")  # endless: reading it whole would eat the memory
    assert "not a regular file" in _one_line_error(lambda: read_text_file(zero, what="x"), zero)


def test_the_reader_refuses_directories_big_binary_and_deep_files(tmp_path: Path) -> None:
    assert "directory" in _one_line_error(lambda: read_text_file(tmp_path, what="x"), tmp_path)
    path = tmp_path / "a.json"
    path.write_bytes(b"\xff\xfe[]")
    assert "not UTF-8" in _one_line_error(lambda: read_json_file(path, what="x"), path)
    path.write_text("[1, 2, 3]")
    assert "larger than" in _one_line_error(
        lambda: read_text_file(path, what="x", max_bytes=4), path
    )
    path.write_text(DEEP)
    assert "nested" in _one_line_error(lambda: read_json_file(path, what="x"), path)
    assert "nested more than 2" in _one_line_error(
        lambda: parse_json("[[[1]]]", where=str(path), max_depth=2), path
    )
    missing = tmp_path / "none.json"
    assert _one_line_error(
        lambda: read_json_file(missing, what="x", missing=f"No {missing}."), missing
    )


def test_a_failed_atomic_write_keeps_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    write_json_atomic(path, {"good": "é"}, what="x")
    before = path.read_bytes()
    message = _one_line_error(lambda: write_json_atomic(path, {"bad": "\ud800"}, what="x"), path)
    assert "lone surrogate" in message and "nothing was written" in message
    assert path.read_bytes() == before and json.loads(before) == {"good": "é"}
    assert "directory" in _one_line_error(
        lambda: write_text_atomic(tmp_path, "{}", what="x"), tmp_path
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    target = blocker / "a.json"  # its parent is a file: the write fails
    _one_line_error(lambda: write_text_atomic(target, "{}", what="x"), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "file"]  # no temp file left


# ------------------------------------------------------------------ saved routers
ROUTES = [
    {"name": "physics", "description": "Physics questions", "utterances": ["black hole"]},
    {"name": "math", "description": "Mathematics questions", "utterances": ["prove sqrt 2"]},
]


@pytest.fixture()
def model() -> MockEmbedding:
    return MockEmbedding(embed_dim=8)


@pytest.fixture()
def saved_router(tmp_path: Path, model: MockEmbedding) -> dict[str, Any]:
    path = tmp_path / "good.json"
    SemanticSelector(ROUTES, embed_model=model).save(path)
    return json.loads(path.read_text())


def _changed(saved: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(saved)), **fields}


ROUTER_CASES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "embed_model_str": lambda s: _changed(s, embed_model="x"),
    "settings_unknown_key": lambda s: _changed(s, settings={**s["settings"], "evil": 1}),
    "settings_threshold_str": lambda s: _changed(s, settings={**s["settings"], "threshold": "hi"}),
    "settings_top_k_str": lambda s: _changed(s, settings={**s["settings"], "top_k": "3"}),
    "settings_aggregation": lambda s: _changed(s, settings={**s["settings"], "aggregation": "mid"}),
    "settings_list": lambda s: _changed(s, settings=[1, 2]),
    "fallback_list": lambda s: _changed(s, settings={**s["settings"], "fallback": [1]}),
    "fallback_unknown": lambda s: _changed(s, settings={**s["settings"], "fallback": "zzz"}),
    "vectors_short": lambda s: _changed(s, vectors={t: v[:3] for t, v in s["vectors"].items()}),
    "vectors_short_and_dim": lambda s: _changed(
        s,
        vectors={t: v[:3] for t, v in s["vectors"].items()},
        embed_model={**s["embed_model"], "dim": 3},
    ),
    "vectors_nan": lambda s: _changed(s, vectors={t: [float("nan")] * 8 for t in s["vectors"]}),
    "vectors_list": lambda s: _changed(s, vectors=[1]),
    "vectors_str": lambda s: _changed(s, vectors={t: "abc" for t in s["vectors"]}),
    "routes_dict": lambda s: _changed(s, routes={"a": 1}),
    "routes_twice": lambda s: _changed(s, routes=s["routes"] + s["routes"]),
    "routes_empty": lambda s: _changed(s, routes=[]),
    "route_threshold_str": lambda s: _changed(s, routes=[{**s["routes"][0], "threshold": "x"}]),
    "fitted_nan": lambda s: _changed(s, fitted_thresholds={"physics": float("nan")}),
    "fitted_list": lambda s: _changed(s, fitted_thresholds=[1, 2]),
    "fitted_unknown_route": lambda s: _changed(s, fitted_thresholds={"nope": 0.5}),
    "deep": lambda s: DEEP,
    "not_utf8": lambda s: b"\xff\xfe{}",
}


@pytest.mark.parametrize("case", sorted(ROUTER_CASES))
def test_a_damaged_saved_router_is_one_line(
    case: str, saved_router: dict[str, Any], tmp_path: Path, model: MockEmbedding
) -> None:
    content = ROUTER_CASES[case](saved_router)
    path = tmp_path / "router.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    _one_line_error(lambda: SemanticSelector.load(path, embed_model=model), path)


def test_a_failed_router_save_keeps_the_saved_router(tmp_path: Path, model: MockEmbedding) -> None:
    path = tmp_path / "router.json"
    SemanticSelector(ROUTES, embed_model=model).save(path)
    before = path.read_bytes()
    bad = SemanticSelector([{"name": "b", "description": "lone \ud800 here"}], embed_model=model)
    assert "lone surrogate" in _one_line_error(lambda: bad.save(path), path)
    assert path.read_bytes() == before
    assert SemanticSelector.load(path, embed_model=model).route("black hole").names == ["physics"]
    _one_line_error(lambda: bad.save(tmp_path), tmp_path)  # a directory: one line too


# ------------------------------------------------------------------ search trees
def _tree(question: str = "Who?") -> SearchTree:
    chunk = JudgedChunk("n1", "Ada wrote it.", score=2)
    return SearchTree(SearchNode(question, chunks=[chunk], answer="Ada.", stop="answered"))


def test_a_failed_tree_save_keeps_the_saved_tree(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    _tree().save(path)
    before = path.read_bytes()
    _one_line_error(lambda: _tree("bad \ud800").save(path), path)
    assert path.read_bytes() == before and SearchTree.load(path) == _tree()


TREE_CASES = {
    "list": [1, 2],
    "no_root": {"llm_calls": 1},
    "question_int": {"root": {"question": 123, "depth": 0, "chunks": []}},
    "chunks_dict": {"root": {"question": "q", "chunks": {"a": 1}}},
    "chunk_id_int": {"root": {"question": "q", "chunks": [{"chunk_id": 5}]}},
    "chunk_text_list": {"root": {"question": "q", "chunks": [{"chunk_id": "a", "text": [1]}]}},
    "score_7": {"root": {"question": "q", "chunks": [{"chunk_id": "a", "score": 7}]}},
    "unknown_field": {"root": {"question": "q", "colour": "red"}},
    "deep": DEEP,
}


@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_a_damaged_tree_is_one_line_in_the_cli(case: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "tree.json"
    content = TREE_CASES[case]
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    _one_line_error(lambda: SearchTree.load(path), path)
    assert main(["judge", "--open", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(path) in err


@posix_only
def test_judge_open_refuses_a_fifo(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "tree.json"
    os.mkfifo(fifo)
    assert main(["judge", "--open", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err


# ------------------------------------------------------------------ the other loaders
LOADERS: dict[str, Callable[[Path], Any]] = {
    "fusion": load_fusion_config,
    "fields": load_field_specs,
    "labelled": load_labelled_set,
    "sources": load_sources,
    "fit": _labelled_queries,
}
BAD_FILES = {
    "deep": DEEP.encode(),
    "not_utf8": b"\xff\xfe\x00\x80garbage",
    "list_of_ints": b"[1, 2]",
    "string": b'"x"',
}
BAD_FIELDS = {
    "fusion": [b'{"fitted_on": [1, 2]}', b'{"alpha": NaN}', b'{"rrf_k": "abc"}'],
    "fields": [
        b"[5]",
        b'[{"name": "a", "type": "string", "allowed": 5}]',
        b'[{"name": "a", "type": "string", "description": 5}]',
        b'[{"name": 5, "type": "string"}]',
    ],
    "labelled": [b'{"question": "q", "id": [1]}\n', b'{"question": "q", "type": {"a": 1}}\n'],
    "sources": [
        b"[5]",
        b'[{"name": "a", "description": 1}]',
        b'[{"name": "a", "description": "d", "collection": {}}]',
        b'[{"name": "a", "description": "d", "utterances": [1]}]',
        b'{"sources": [{"name": "a", "description": "d"}], "top_k_routes": "2"}',
    ],
    "fit": [b'{"query": "q"}\n', b"[1]\n"],
}
LOADER_CASES = [
    (loader, name, content) for loader in LOADERS for name, content in BAD_FILES.items()
]
LOADER_CASES += [
    (loader, f"field{i}", content)
    for loader, contents in BAD_FIELDS.items()
    for i, content in enumerate(contents)
]


@pytest.mark.parametrize(("loader", "case", "content"), LOADER_CASES)
def test_a_damaged_file_is_one_line(loader: str, case: str, content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "artifact.json"
    path.write_bytes(content)
    _one_line_error(lambda: LOADERS[loader](path), path)
    assert path.read_bytes() == content  # nothing overwritten


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_directory_is_one_line(loader: str, tmp_path: Path) -> None:
    _one_line_error(lambda: LOADERS[loader](tmp_path), tmp_path)


@posix_only
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_fifo_is_refused_not_waited_on(loader: str, tmp_path: Path) -> None:
    fifo = tmp_path / "artifact.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_line_error(lambda: LOADERS[loader](fifo), fifo)


def test_the_fusion_config_and_labelled_set_are_saved_atomically(tmp_path: Path) -> None:
    path = save_fusion_config(FusionConfig(alpha=0.3), tmp_path / "fusion.json")
    before = path.read_bytes()
    bad = FusionConfig(fitted_on={"dataset": "\ud800"})
    _one_line_error(lambda: save_fusion_config(bad, path), path)
    assert path.read_bytes() == before and load_fusion_config(path).alpha == 0.3
    labelled = tmp_path / "set.jsonl"
    save_labelled_set([LabelledExample("q1", "What?")], labelled)
    before = labelled.read_bytes()
    _one_line_error(
        lambda: save_labelled_set([LabelledExample("q2", "\ud800")], labelled), labelled
    )
    assert labelled.read_bytes() == before


# ------------------------------------------------------------------ the result cache
CACHE_FILES = {
    "list": b"[1, 2]",
    "string": b'"x"',
    "not_utf8": b"\xff\xfe{}",
    "deep": DEEP.encode(),
    "results_list": b'{"results": [1, 2], "timing": {"questions": 1, "seconds": 1}}',
    "result_int": b'{"results": {"q1": 5}}',
    "timing_str": b'{"results": {}, "timing": "slow"}',
}


@pytest.mark.parametrize("case", sorted(CACHE_FILES))
def test_an_unreadable_cache_is_empty(case: str, tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    path.write_bytes(CACHE_FILES[case])
    cache = ResultCache(path)
    assert cache.load() == {} and cache.timing == {"questions": 0, "seconds": 0.0}
    cache.save("vector", {"q1": {"key": "k"}}, computed=1, seconds=0.5)
    assert ResultCache(path).load() == {"q1": {"key": "k"}}


def test_a_directory_as_cache_is_empty(tmp_path: Path) -> None:
    assert ResultCache(tmp_path).load() == {}
