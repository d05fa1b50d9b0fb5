"""``embed_model="openai:MODEL"``: embeddings from an OpenAI-compatible endpoint.

Everything runs against a fake endpoint started here (``POST /v1/embeddings`` on 127.0.0.1):
its vectors are a signed hashed bag of character bigrams, L2-normalised (64-d, or the
``dimensions`` asked for), so texts that share words, Chinese or English, are close. It records
every request, refuses more than 10 inputs per request with HTTP 400 as DashScope does, and can
be switched to answer HTTP 500 or to hang.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from llama_index.core import Document

from llama_index_rag_pack import EmbeddingError, RagPack, RagPackError
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.models import settings
from llama_index_rag_pack.models.openai_embedding import OpenAICompatibleEmbedding
from llama_index_rag_pack.testing import ScriptedLLM

DIM = 64
MAX_INPUTS = 10
MODEL = "openai:fake-embed"
KEY = "sk-test-secret-4711"
ENV_VARS = (
    "RAG_PACK_EMBED_MODEL",
    "RAG_PACK_EMBED_API_BASE",
    "RAG_PACK_EMBED_API_KEY",
    "RAG_PACK_EMBED_DIMENSIONS",
    "RAG_PACK_EMBED_BATCH_SIZE",
    "RAG_PACK_EMBED_MAX_RETRIES",
    "RAG_PACK_EMBED_TIMEOUT",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
)

DOCS = [
    Document(
        id_="great-wall",
        text="长城是中国古代的军事防御工程。长城绵延两万多公里，横跨中国北方。"
        "修建长城用了两千多年。",
        metadata={"title": "长城"},
    ),
    Document(
        id_="panda",
        text="大熊猫生活在中国四川的山区。大熊猫主要吃竹子，每天要吃很多竹子。大熊猫是珍稀动物。",
        metadata={"title": "大熊猫"},
    ),
    Document(
        id_="milvus",
        text="Milvus is an open-source vector database. It stores embeddings and runs fast "
        "similarity search over billions of vectors. Milvus Lite runs inside Python.",
        metadata={"title": "Milvus"},
    ),
    Document(
        id_="aardvark",
        text="The aardvark is a nocturnal mammal of Africa. It eats ants and termites. "
        "It digs burrows with its strong claws.",
        metadata={"title": "Aardvark"},
    ),
    Document(
        id_="apollo",
        text="Apollo 11 landed on the Moon in July 1969. Neil Armstrong stepped out first. "
        "Buzz Aldrin followed him. Michael Collins stayed in lunar orbit.",
        metadata={"title": "Apollo 11"},
    ),
]
QUERIES = {
    "大熊猫吃什么？": "panda",
    "长城有多长？": "great-wall",
    "What is a vector database?": "milvus",
    "Which mammal eats ants and termites?": "aardvark",
    "Who walked on the Moon in 1969?": "apollo",
}


# ---------------------------------------------------------------- the fake endpoint


def fake_vector(text: str, dim: int) -> list[float]:
    """A signed hashed bag of the text's character bigrams, L2-normalised."""
    text = text.lower()
    vector = [0.0] * dim
    for i in range(max(len(text) - 1, 1)):
        gram = text[i : i + 2]
        if not any(c.isalnum() for c in gram):
            continue
        h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "big")
        vector[h % dim] += 1.0 if (h >> 40) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm:
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


class FakeEmbeddingServer:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint in a thread (see the module docstring).

    ``mode``: ``"ok"``, ``"error"`` (HTTP 500), another HTTP status (an int), ``"short"`` (one
    vector too few) or ``"hang"`` (no answer until stopped).
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802  (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({**body, "authorization": self.headers["Authorization"]})
                status, reply = server.reply(self.path, body)
                if status == 0:  # hang
                    server.released.wait(30)
                    return
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.mode == "hang":
            return 0, {}
        if self.mode == "error":
            return 500, {"error": {"message": "upstream exploded", "type": "server_error"}}
        if isinstance(self.mode, int):  # any other HTTP error
            return self.mode, {"error": {"message": f"refused with {self.mode}", "type": "x"}}
        if path != "/v1/embeddings":
            return 404, {"error": {"message": f"no route {path}", "type": "not_found"}}
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if len(inputs) > MAX_INPUTS:
            message = f"batch size is invalid, it should not be larger than {MAX_INPUTS}."
            return 400, {"error": {"message": message, "type": "InvalidParameter"}}
        if self.mode == "short":  # one vector missing
            inputs = inputs[:-1]
        dim = int(body.get("dimensions") or DIM)
        tokens = sum(len(t) for t in inputs)
        return 200, {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": fake_vector(text, dim)}
                for i, text in enumerate(inputs)
            ],
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    @property
    def batch_sizes(self) -> list[int]:
        return [len(r["input"]) if isinstance(r["input"], list) else 1 for r in self.requests]

    def stop(self) -> None:
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture()
def server() -> Iterator[FakeEmbeddingServer]:
    fake = FakeEmbeddingServer()
    yield fake
    fake.stop()


@pytest.fixture()
def endpoint(server: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch) -> FakeEmbeddingServer:
    """The fake endpoint, named by ``RAG_PACK_EMBED_API_BASE``."""
    monkeypatch.setenv("RAG_PACK_EMBED_API_BASE", server.base_url)
    return server


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RagPack, Any]]:
    """One pack indexed through the endpoint, for the tests that only read it; the key comes
    from ``RAG_PACK_EMBED_API_KEY`` (set beside another ``OPENAI_API_KEY``)."""
    fake = FakeEmbeddingServer()
    with pytest.MonkeyPatch.context() as mp:
        for var in ENV_VARS:
            mp.delenv(var, raising=False)
        mp.setenv("RAG_PACK_EMBED_API_BASE", fake.base_url)
        mp.setenv("RAG_PACK_EMBED_API_KEY", KEY)
        mp.setenv("OPENAI_API_KEY", "sk-the-llm-key")
        pack = RagPack(
            DOCS,
            uri=str(tmp_path_factory.mktemp("openai-embed") / "milvus.db"),
            collection_name="multilingual",
            embed_model=MODEL,
            llm=ScriptedLLM(replies=[]),
            similarity_top_k=2,
        )
    yield pack, fake
    fake.stop()


def _fails_as_pack_error(excinfo: pytest.ExceptionInfo[Any]) -> None:
    """The error is the pack's own, no ``openai`` or ``httpx`` exception type."""
    error = excinfo.value
    assert isinstance(error, EmbeddingError) and isinstance(error, RagPackError)
    assert not isinstance(error, openai.OpenAIError | httpx.HTTPError)
    assert type(error).__module__.startswith("llama_index_rag_pack")
    assert "\n" not in str(error)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# ---------------------------------------------------------------- through the pack


@pytest.mark.slow
@pytest.mark.parametrize(("query", "expected"), list(QUERIES.items()))
def test_chinese_and_english_documents_are_found_through_the_endpoint(
    shared: tuple[RagPack, Any], query: str, expected: str
) -> None:
    pack, _ = shared
    hits = pack.retriever("vector").retrieve(query)
    assert hits and hits[0].node.ref_doc_id == expected, [h.node.ref_doc_id for h in hits]


@pytest.mark.slow
def test_requests_hold_at_most_ten_inputs_as_floats_with_the_right_key(
    shared: tuple[RagPack, Any],
) -> None:
    pack, fake = shared
    assert isinstance(pack.embed_model, OpenAICompatibleEmbedding)
    assert pack.embed_model.embed_batch_size == MAX_INPUTS
    sizes = fake.batch_sizes
    assert max(sizes) == MAX_INPUTS  # the 12 sentences went in batches of 10
    assert all(r["model"] == "fake-embed" for r in fake.requests)
    assert all(r["encoding_format"] == "float" for r in fake.requests)
    assert all("dimensions" not in r for r in fake.requests)  # sent only when set
    assert {r["authorization"] for r in fake.requests} == {f"Bearer {KEY}"}


@pytest.mark.slow
def test_the_collection_has_the_endpoint_s_dimension(shared: tuple[RagPack, Any]) -> None:
    pack, _ = shared
    store = pack.vector_store
    assert milvus_utils.collection_dim(store.client, store.collection_name) == DIM


@pytest.mark.slow
def test_describe_names_the_model_and_base_url_never_the_key(
    shared: tuple[RagPack, Any],
) -> None:
    pack, fake = shared
    description = pack.describe()["embedding"]
    assert description == f"fake-embed (OpenAI-compatible, {fake.base_url})"
    assert KEY not in str(pack.describe()) and KEY not in repr(pack.embed_model)


@pytest.mark.slow
async def test_async_retrieval_works(shared: tuple[RagPack, Any]) -> None:
    pack, _ = shared
    hits = await pack.retriever("vector").aretrieve("大熊猫吃竹子吗？")
    assert hits[0].node.ref_doc_id == "panda"


@pytest.mark.slow
def test_async_retrieval_works_under_one_event_loop_after_another(
    shared: tuple[RagPack, Any],
) -> None:
    pack, _ = shared
    retriever = pack.retriever("vector")
    for query in ("What does the aardvark eat?", "Where does Milvus Lite run?"):
        hits = asyncio.run(retriever.aretrieve(query))  # a new loop, a new client
        assert hits


@pytest.mark.slow
def test_openai_model_from_the_environment_with_its_batch_size(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_PACK_EMBED_MODEL", MODEL)
    monkeypatch.setenv("RAG_PACK_EMBED_BATCH_SIZE", "3")
    model = settings.resolve_embed_model(None)
    assert isinstance(model, OpenAICompatibleEmbedding)
    vectors = model.get_text_embedding_batch([f"text {i}" for i in range(7)])
    assert len(vectors) == 7 and all(len(v) == DIM for v in vectors)
    assert endpoint.batch_sizes == [3, 3, 1]
    assert endpoint.requests[0]["authorization"] == "Bearer none"  # no key: a placeholder


def test_the_base_url_and_key_come_from_the_documented_variables_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def resolved(**kwargs: Any) -> OpenAICompatibleEmbedding:
        return settings.resolve_embed_model("openai:text-embedding-v3", **kwargs)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert resolved().api_base == "https://api.openai.com/v1"  # OpenAI's, with a key
    for var, url in (
        ("OPENAI_API_BASE", "http://api-base:1/v1"),
        ("OPENAI_BASE_URL", "http://base-url:2/v1"),
        ("RAG_PACK_EMBED_API_BASE", "http://rag-pack:3/v1/"),
    ):
        monkeypatch.setenv(var, url)
        assert resolved().api_base == url.rstrip("/")  # each wins over the ones before
    assert resolved(api_base="http://explicit:4/v1").api_base == "http://explicit:4/v1"
    assert resolved().api_key == "sk-openai"
    monkeypatch.setenv("RAG_PACK_EMBED_API_KEY", "sk-embed")
    assert resolved().api_key == "sk-embed"
    monkeypatch.setenv("RAG_PACK_EMBED_DIMENSIONS", "512")
    model = resolved()
    assert model.dimensions == 512 and model.additional_kwargs["dimensions"] == 512
    assert settings.describe_embed_model(model).endswith("http://rag-pack:3/v1, 512-d)")
    assert resolved(dimensions=256).dimensions == 256
    assert (model.max_retries, model.timeout, model.embed_batch_size) == (2, 60.0, 10)


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("openai:", {}, "names no model: write openai:MODEL"),
        ("  OpenAI:   ", {}, "names no model"),
        (MODEL, {"RAG_PACK_EMBED_BATCH_SIZE": "ten"}, "RAG_PACK_EMBED_BATCH_SIZE must be"),
        (MODEL, {"RAG_PACK_EMBED_BATCH_SIZE": "4096"}, "lower RAG_PACK_EMBED_BATCH_SIZE"),
        (MODEL, {"RAG_PACK_EMBED_DIMENSIONS": "0"}, "RAG_PACK_EMBED_DIMENSIONS must be"),
        (MODEL, {"RAG_PACK_EMBED_TIMEOUT": "soon"}, "RAG_PACK_EMBED_TIMEOUT must be"),
        (MODEL, {"RAG_PACK_EMBED_API_BASE": "localhost:8000"}, "is not an http"),
        (MODEL, {"RAG_PACK_EMBED_API_BASE": ""}, "needs a key: set RAG_PACK_EMBED_API_KEY"),
    ],
)
def test_a_bad_spec_or_setting_is_a_configuration_error_before_any_request(
    endpoint: FakeEmbeddingServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    spec: str,
    env: dict[str, str],
    message: str,
) -> None:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    uri = tmp_path / "milvus.db"
    with pytest.raises(ConfigurationError, match=message) as excinfo:
        RagPack(DOCS, uri=str(uri), embed_model=spec, llm=ScriptedLLM(replies=[]))
    assert "\n" not in str(excinfo.value)
    assert endpoint.requests == [] and not uri.exists()


@pytest.mark.slow
def test_dimensions_set_the_collection_and_another_dimension_is_refused_on_reopen(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = str(tmp_path / "milvus.db")
    monkeypatch.setenv("RAG_PACK_EMBED_DIMENSIONS", "1024")
    pack = RagPack(DOCS[:2], uri=uri, collection_name="wide", embed_model=MODEL)
    store = pack.vector_store
    assert milvus_utils.collection_dim(store.client, "wide") == 1024
    assert {r["dimensions"] for r in endpoint.requests} == {1024}
    assert pack.describe()["embedding"].endswith(", 1024-d)")
    assert pack.retriever("vector").retrieve("大熊猫吃什么？")[0].node.ref_doc_id == "panda"
    monkeypatch.setenv("RAG_PACK_EMBED_DIMENSIONS", "1536")
    with pytest.raises(ConfigurationError, match="holds 1024-d vectors .* makes 1536-d ones"):
        RagPack.open(uri=uri, collection_name="wide", embed_model=MODEL)


# ---------------------------------------------------------------- failures


@pytest.mark.slow
def test_a_server_error_is_a_pack_error_after_two_retries(
    endpoint: FakeEmbeddingServer, tmp_path: Path
) -> None:
    endpoint.mode = "error"
    uri = tmp_path / "milvus.db"
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match="HTTP 500: upstream exploded") as excinfo:
        RagPack(DOCS, uri=str(uri), embed_model=MODEL, llm=ScriptedLLM(replies=[]))
    assert time.monotonic() - start < 10
    _fails_as_pack_error(excinfo)
    assert endpoint.base_url in str(excinfo.value)
    assert len(endpoint.requests) == 3  # one layer of retries: 1 + max_retries
    assert not uri.exists()  # nothing was created


@pytest.mark.slow
def test_an_unreachable_endpoint_is_a_pack_error_within_seconds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = _closed_port_url()
    monkeypatch.setenv("RAG_PACK_EMBED_API_BASE", url)
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match="Could not reach") as excinfo:
        RagPack(DOCS, uri=str(tmp_path / "milvus.db"), embed_model=MODEL)
    assert time.monotonic() - start < 10
    _fails_as_pack_error(excinfo)
    assert url in str(excinfo.value) and "RAG_PACK_EMBED_API_BASE" in str(excinfo.value)


@pytest.mark.slow
def test_a_hanging_endpoint_times_out_as_a_pack_error(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_PACK_EMBED_TIMEOUT", "0.5")
    monkeypatch.setenv("RAG_PACK_EMBED_MAX_RETRIES", "0")
    model = settings.resolve_embed_model(MODEL)
    endpoint.mode = "hang"
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match="within 0.5 s") as excinfo:
        model.get_query_embedding("Is anyone there?")
    assert time.monotonic() - start < 5
    _fails_as_pack_error(excinfo)


def test_a_batch_over_the_endpoint_s_limit_names_the_setting(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_PACK_EMBED_BATCH_SIZE", "12")
    model = settings.resolve_embed_model(MODEL)
    with pytest.raises(EmbeddingError, match="HTTP 400.*RAG_PACK_EMBED_BATCH_SIZE below 12") as e:
        model.get_text_embedding_batch([f"text {i}" for i in range(12)])
    _fails_as_pack_error(e)
    assert len(endpoint.requests) == 1  # a refused request is not retried


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (401, "HTTP 401: refused with 401.*set RAG_PACK_EMBED_API_KEY"),
        (404, "HTTP 404: refused with 404.*check the name after 'openai:'"),
        (429, r"is rate limiting \(HTTP 429: refused with 429\): wait"),
        ("short", "returned 1 vectors for 2 texts"),
    ],
)
async def test_every_failure_says_what_to_fix_sync_and_async(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch, mode: Any, message: str
) -> None:
    monkeypatch.setenv("RAG_PACK_EMBED_MAX_RETRIES", "0")
    model = settings.resolve_embed_model(MODEL)
    endpoint.mode = mode
    with pytest.raises(EmbeddingError, match=message) as excinfo:
        model.get_text_embedding_batch(["one", "two"])
    _fails_as_pack_error(excinfo)
    with pytest.raises(EmbeddingError, match=message) as excinfo:
        await model.aget_text_embedding_batch(["three", "four"])
    _fails_as_pack_error(excinfo)


@pytest.mark.slow
async def test_query_time_failures_are_pack_errors_sync_and_async(
    endpoint: FakeEmbeddingServer, tmp_path: Path
) -> None:
    pack = RagPack(DOCS, uri=str(tmp_path / "milvus.db"), embed_model=MODEL, sentence_index=False)
    retriever = pack.retriever("vector")
    endpoint.mode = "error"
    with pytest.raises(EmbeddingError) as excinfo:
        retriever.retrieve("长城有多长？")
    _fails_as_pack_error(excinfo)
    with pytest.raises(EmbeddingError) as excinfo:
        await retriever.aretrieve("What is a vector database?")
    _fails_as_pack_error(excinfo)


# ---------------------------------------------------------------- command line


@pytest.mark.slow
@pytest.mark.integration
def test_cli_indexes_and_answers_with_an_openai_embed_model(
    endpoint: FakeEmbeddingServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    from llama_index_rag_pack.cli import main

    corpus = tmp_path / "docs"
    corpus.mkdir()
    for doc in DOCS:
        (corpus / f"{doc.doc_id}.txt").write_text(doc.text, encoding="utf-8")
    uri = str(tmp_path / "milvus.db")
    common = ["--uri", uri, "--embed-model", MODEL]
    assert main([*common, "index", str(corpus)]) == 0
    assert "now holds" in capsys.readouterr().out
    llm = ScriptedLLM(default_reply="大熊猫主要吃竹子 [1](id=1).")
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    assert main([*common, "ask", "大熊猫吃什么？", "--no-stream"]) == 0
    out = capsys.readouterr().out
    assert f"fake-embed (OpenAI-compatible, {endpoint.base_url})" in out
    assert "大熊猫主要吃竹子" in out and "panda.txt" in out
    assert max(endpoint.batch_sizes) <= MAX_INPUTS
    endpoint.mode = "error"
    monkeypatch.setenv("RAG_PACK_EMBED_MAX_RETRIES", "0")
    assert main([*common, "ask", "长城有多长？", "--no-stream"]) == 2
    err = capsys.readouterr().err
    assert "error: The embedding endpoint" in err and "HTTP 500" in err
    assert "Traceback" not in err
