"""LocalEmbedding: queries on ONNX Runtime, batches on PyTorch, the same vectors either way."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models import onnx_encoder
from llama_index_rag_pack.models.local_embedding import LocalEmbedding

TEXTS = [
    "Which river flows through Budapest?",
    "",
    "   padded with spaces   ",
    "Ünïcödé — 北京 and émojis 🚀 in one line",
    "A long passage about rivers. " * 120,  # far past the 256-token limit: truncated alike
    "x",
]


@pytest.fixture(scope="module")
def torch_reference(embed_model):
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    return HuggingFaceEmbedding(model_name=embed_model.model_name, device="cpu")


@pytest.mark.slow
def test_default_model_embeds_queries_on_onnx_with_the_torch_vectors(embed_model, torch_reference):
    assert isinstance(embed_model, LocalEmbedding)
    assert embed_model.query_backend == "onnx"
    onnx = np.array([embed_model.get_query_embedding(t) for t in TEXTS])
    reference = np.array(torch_reference.get_text_embedding_batch(TEXTS))
    assert onnx.shape == (len(TEXTS), 384)
    assert np.allclose(onnx, reference, atol=1e-5)
    assert np.allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)


@pytest.fixture()
def spied(monkeypatch):
    """Record, per get_text_embedding_batch call, whether ONNX Runtime encoded anything."""
    seen: list[str] = []
    original = onnx_encoder.OnnxSentenceEncoder.encode

    def encode(self, texts):
        seen.append("onnx")
        return original(self, texts)

    monkeypatch.setattr(onnx_encoder.OnnxSentenceEncoder, "encode", encode)

    def runtime_of(model, n: int) -> str:
        seen.clear()
        texts = [f"sentence number {i:03d} about a river" for i in range(n)]  # 33 characters
        model.get_text_embedding_batch(texts)
        return "onnx" if seen else "torch"

    return runtime_of


@pytest.mark.slow
def test_batches_run_on_onnx_unless_only_torch_is_loaded(
    embed_model, exported_copy, spied, torch_reference
):
    asking = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy))
    asking.get_query_embedding("a question first, as `rag-pack ask` does")
    for n in (3, 20, 100):
        assert spied(asking, n) == "onnx"
    assert asking._torch is None  # never loaded
    indexing = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy))
    assert spied(indexing, 100) == "onnx" and indexing._torch is None  # indexing, no PyTorch
    # only PyTorch loaded (e.g. a model ONNX cannot run): everything stays on it
    torch_only = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy))
    torch_only._torch = torch_reference  # what _torch_model() loads (loaded once per module)
    assert spied(torch_only, 20) == "torch" and spied(torch_only, 1) == "torch"
    assert torch_only._onnx is None


@pytest.mark.slow
def test_batches_on_either_runtime_give_the_same_vectors(embed_model, torch_reference):
    texts = [f"sentence number {i} about a river" for i in range(13)]
    torch_side = np.array(torch_reference._get_text_embeddings(texts))
    onnx_side = embed_model._onnx_encoder().encode(texts)
    assert np.allclose(torch_side, onnx_side, atol=1e-5)


def test_async_query_embedding_matches_sync(embed_model):
    sync = embed_model.get_query_embedding(TEXTS[0])
    asynchronous = asyncio.run(embed_model.aget_query_embedding(TEXTS[0]))
    assert np.allclose(sync, asynchronous, atol=1e-6)


@pytest.mark.slow
def test_torch_backend_never_loads_onnx(embed_model):
    model = LocalEmbedding(embed_model.model_name, backend="torch")
    vector = model.get_query_embedding(TEXTS[0])
    assert model.query_backend == "torch" and model._onnx is None
    assert np.allclose(vector, embed_model.get_query_embedding(TEXTS[0]), atol=1e-5)


@pytest.mark.slow
def test_onnx_backend_embeds_large_batches_on_onnx_too(embed_model, exported_copy):
    model = LocalEmbedding(embed_model.model_name, backend="onnx", onnx_dir=str(exported_copy))
    texts = [f"text {i}" for i in range(24)]
    vectors = np.array(model.get_text_embedding_batch(texts))
    assert model._torch is None
    assert np.allclose(vectors, embed_model.get_text_embedding_batch(texts), atol=1e-5)


def test_unknown_backend_is_one_error(embed_model):
    with pytest.raises(ConfigurationError, match="Unknown embed backend 'cuda'"):
        LocalEmbedding(embed_model.model_name, backend="cuda")


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_model_name_is_one_error(name):
    with pytest.raises(ConfigurationError, match="needs a model directory or name"):
        LocalEmbedding(name)


@pytest.mark.slow
def test_a_directory_that_is_no_model_fails_at_first_use_with_one_error(tmp_path):
    model = LocalEmbedding(str(tmp_path), onnx_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigurationError, match="Cannot load the embedding model"):
        model.get_query_embedding("hello")


def test_backend_from_environment(embed_model, monkeypatch):
    monkeypatch.setenv("RAG_PACK_EMBED_BACKEND", "torch")
    assert LocalEmbedding(embed_model.model_name).backend == "torch"


def _copy_model(embed_model, tmp_path: Path, pooling: dict | None = None) -> Path:
    model_dir = tmp_path / "model"
    shutil.copytree(embed_model.model_name, model_dir)
    if pooling is not None:
        (model_dir / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return model_dir


@pytest.mark.slow
def test_a_model_onnx_cannot_run_falls_back_to_torch(embed_model, tmp_path):
    cls_pooling = {"word_embedding_dimension": 384, "pooling_mode_cls_token": True}
    model_dir = _copy_model(embed_model, tmp_path, cls_pooling)
    auto = LocalEmbedding(str(model_dir), onnx_dir=str(tmp_path / "cache"))
    assert len(auto.get_query_embedding("hello")) == 384
    assert auto.query_backend == "torch"
    assert not (tmp_path / "cache").exists()  # nothing exported
    strict = LocalEmbedding(str(model_dir), backend="onnx", onnx_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigurationError, match="not mean pooling"):
        strict.get_query_embedding("hello")


@pytest.mark.slow
def test_a_damaged_export_is_made_again(embed_model, exported_copy):
    path = onnx_encoder.onnx_export_path(embed_model.model_name, exported_copy)
    path.unlink()  # a new file: the fixture's may be a link to the session's export
    path.write_bytes(b"not an onnx model")
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy))
    vector = model.get_query_embedding(TEXTS[0])
    assert model.query_backend == "onnx"
    assert np.allclose(vector, embed_model.get_query_embedding(TEXTS[0]), atol=1e-5)
    assert path.stat().st_size > 1_000_000


@pytest.mark.slow
def test_an_existing_export_is_reused(embed_model, exported_copy, monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr("llama_index_rag_pack.models.local_embedding.export_onnx", no_export)
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy))
    assert model.query_backend == "onnx"


def test_an_export_is_named_by_the_models_content_not_its_installation(embed_model, tmp_path):
    """Every installation of one model (a virtual environment each) shares its export; a
    changed model gets a new one."""
    from llama_index_rag_pack.models import model_key

    cache = tmp_path / "cache"
    (cache / "onnx").mkdir(parents=True)  # where the exports and the digests go
    original = onnx_encoder.onnx_export_path(embed_model.model_name, cache)
    installed = Path(embed_model.model_name)
    model_dir = tmp_path / "another-venv" / installed.parent.name / installed.name
    shutil.copytree(installed, model_dir)  # another installation: new path, new times
    assert onnx_encoder.onnx_export_path(model_dir, cache) == original
    weights = model_dir / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert onnx_encoder.onnx_export_path(model_dir, cache) == original  # touched, same content
    digests = json.loads((cache / "onnx" / "digests.json").read_text())
    assert len(digests) == 3 and len(set(digests.values())) == 1  # hashed once per file state
    with weights.open("r+b") as f:  # one byte of the weights changed, the size kept
        f.seek(4096)
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 1]))
    changed = onnx_encoder.onnx_export_path(model_dir, cache)
    assert changed != original
    (model_dir / "config.json").write_text(
        (model_dir / "config.json").read_text().replace("}", ', "note": 1}', 1)
    )
    assert onnx_encoder.onnx_export_path(model_dir, cache) not in (original, changed)
    hashed = []
    real = model_key.hashlib.file_digest
    with pytest.MonkeyPatch.context() as patch:  # known file states are never read again
        patch.setattr(model_key.hashlib, "file_digest", lambda *a: hashed.append(a) or real(*a))
        assert onnx_encoder.onnx_export_path(embed_model.model_name, cache) == original
        assert hashed == []
        assert onnx_encoder.onnx_export_path(model_dir, cache) not in (original, changed)
        assert hashed == []  # the changed weights' state too, hashed once above


@pytest.mark.slow
def test_a_process_that_only_embeds_queries_never_imports_torch(embed_model, tmp_path):
    embed_model.get_query_embedding("make sure the export exists")
    code = (
        "import sys\n"
        "from llama_index_rag_pack.models.settings import resolve_embed_model\n"
        "model = resolve_embed_model()\n"
        "assert len(model.get_query_embedding('hello')) == 384\n"
        "assert model.query_backend == 'onnx'\n"
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAG_PACK_EMBED_BACKEND"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.slow
def test_an_unwritable_cache_falls_back_to_torch_or_is_one_error(embed_model, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    auto = LocalEmbedding(embed_model.model_name, onnx_dir=str(blocker / "cache"))
    vector = auto.get_query_embedding(TEXTS[0])
    assert auto.query_backend == "torch"
    assert np.allclose(vector, embed_model.get_query_embedding(TEXTS[0]), atol=1e-5)
    strict = LocalEmbedding(embed_model.model_name, backend="onnx", onnx_dir=str(blocker / "cache"))
    with pytest.raises(ConfigurationError, match="Cannot export"):
        strict.get_query_embedding(TEXTS[0])


def test_only_the_most_recently_used_exports_of_a_model_are_kept(tmp_path):
    from llama_index_rag_pack.models.onnx_encoder import KEEP_EXPORTS, prune_exports

    old = [tmp_path / f"minilm-{i:016x}.onnx" for i in range(5)]
    for age, path in enumerate(old):
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 - age * 1000, 1_000_000 - age * 1000))
    other = tmp_path / "mpnet-0000000000000000.onnx"
    other.write_bytes(b"x")
    os.utime(other, (1, 1))  # another model's export, however old, stays
    kept = tmp_path / "minilm-ffffffffffffffff.onnx"
    kept.write_bytes(b"x")
    os.utime(kept, (1, 1))  # just exported (pruning marks it used)
    prune_exports(kept)
    left = sorted(p.name for p in tmp_path.iterdir())
    newest = sorted(p.name for p in old[: KEEP_EXPORTS - 1])
    assert left == sorted([kept.name, other.name, *newest])


@pytest.fixture()
def two_core_encoder(embed_model, exported_copy):
    """An encoder with one query thread and two cores for batches."""
    path = onnx_encoder.onnx_export_path(embed_model.model_name, exported_copy)
    return onnx_encoder.OnnxSentenceEncoder(
        embed_model.model_name, path, threads=1, batch_threads=2
    )


@pytest.mark.slow
def test_batches_run_on_every_core_in_order_with_the_same_vectors(
    two_core_encoder, embed_model, exported_copy, monkeypatch
):
    encoder = two_core_encoder
    texts = [f"Sentence {i}: {'rivers ' * (i % 7)}and {i * 37} boats." for i in range(24)]
    alone = np.array([encoder.encode([t])[0] for t in texts])
    few = encoder.encode(texts[: onnx_encoder.RUN_BATCH])  # one run: the query session
    assert encoder._batch_session is None
    assert np.allclose(few, alone[: onnx_encoder.RUN_BATCH], atol=1e-5)
    threads: set[str] = set()
    in_flight, most = [0], [0]
    lock = threading.Lock()
    together = threading.Barrier(2, timeout=30)  # broken unless two runs are in flight at once
    run = encoder._run

    def recorded(session, batch):
        name = threading.current_thread().name
        with lock:
            first = name not in threads
            threads.add(name)
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            if first:
                together.wait()
            return run(session, batch)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(encoder, "_run", recorded)
    batch = encoder.encode(texts)  # six runs of four, shared by two threads
    assert encoder._batch_session is not None and encoder._batch_session is not encoder._session
    assert len(threads) == 2 and all(t.startswith("rag-pack-embed") for t in threads)
    assert np.allclose(batch, alone, atol=1e-5)  # each row its own text's vector, in order
    # four batches at once (as an async batch's parts arrive) still run two at a time
    results: dict[int, np.ndarray] = {}
    callers = [
        threading.Thread(target=lambda k=k: results.__setitem__(k, encoder.encode(texts[k:])))
        for k in range(4)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert most[0] == 2
    for k in range(4):
        assert np.allclose(results[k], alone[k:], atol=1e-5)
    path = onnx_encoder.onnx_export_path(embed_model.model_name, exported_copy)
    same = onnx_encoder.OnnxSentenceEncoder(
        embed_model.model_name, path, threads=2, batch_threads=1
    )
    assert same._batch_session is same._session  # no more cores to give: one session


@pytest.mark.slow
def test_a_batch_after_the_interpreter_stops_taking_threads_runs_in_the_caller(
    two_core_encoder,
):
    encoder = two_core_encoder
    texts = [f"text number {i}" for i in range(9)]
    expected = encoder.encode(texts)
    encoder._batch_pool().shutdown()  # what interpreter shutdown does to every pool
    assert np.allclose(encoder.encode(texts), expected, atol=1e-6)


@pytest.mark.slow
def test_a_process_waits_for_another_ones_export_instead_of_exporting_again(
    embed_model, tmp_path, monkeypatch
):
    embed_model.get_query_embedding("make sure the session's export exists")
    source = onnx_encoder.onnx_export_path(embed_model.model_name)
    target = onnx_encoder.onnx_export_path(embed_model.model_name, tmp_path)

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr("llama_index_rag_pack.models.local_embedding.export_onnx", no_export)
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(tmp_path))
    backends = []
    with onnx_encoder.export_lock(target):  # another process is exporting
        waiting = threading.Thread(target=lambda: backends.append(model.query_backend))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # waits for the lock
        os.link(source, target)  # the other process's export lands
    waiting.join(60)
    assert backends == ["onnx"]  # loaded what the other one made; an export would have failed


def test_a_model_directory_under_home_is_found(embed_model, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "minilm").symlink_to(embed_model.model_name)  # a model directory there
    model = LocalEmbedding("~/minilm", onnx_dir=str(tmp_path / "cache"))
    assert model.model_name == str(tmp_path / "minilm")
    with pytest.raises(ConfigurationError, match="No embedding model directory at '.*nothing'"):
        LocalEmbedding("~/nothing")


def _hub_cache_entry(cache: Path, repo_id: str, model_dir: str) -> None:
    """``repo_id`` laid out as the Hub cache stores it, its snapshot linked to ``model_dir``."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots").mkdir()
    (repo / "snapshots" / "0123abcd").symlink_to(model_dir)


@pytest.mark.parametrize("name", ["nosuch", "no/such-model", "a/b/c", "bad name!"])
def test_a_model_name_not_on_this_machine_is_one_error_before_loading(name, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_INDEX_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(LocalEmbedding, "_torch_model", lambda self: pytest.fail("loaded"))
    with pytest.raises(ConfigurationError, match="never downloaded") as info:
        LocalEmbedding(name)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_a_model_name_in_the_cache_is_found_and_loaded(embed_model, monkeypatch, tmp_path):
    from llama_index_rag_pack.models.local_embedding import cached_model_dir

    monkeypatch.setenv("LLAMA_INDEX_CACHE_DIR", str(tmp_path))
    _hub_cache_entry(tmp_path, "sentence-transformers/tiny-minilm", embed_model.model_name)
    _hub_cache_entry(tmp_path, "org/other", embed_model.model_name)
    snapshot = str(tmp_path / "models--org--other" / "snapshots" / "0123abcd")
    assert cached_model_dir("org/other") == snapshot
    assert cached_model_dir("tiny-minilm")  # a bare name, under sentence-transformers/ as well
    assert cached_model_dir("org/tiny-minilm") is None and cached_model_dir("other") is None
    loads: list[str] = []
    monkeypatch.setattr(LocalEmbedding, "_torch_model", lambda self: loads.append(self.model_name))
    LocalEmbedding("tiny-minilm")
    assert loads == ["tiny-minilm"]  # found, so loaded at once (sentence-transformers resolves it)
