"""``EndpointReranker`` against a fake server that speaks each API's real bodies: the order
follows the server's scores, each API's request is exactly its documented shape, the API is found
from the answers, batches split requests, the async path equals the sync one, and every failure
is one ``RerankError`` line (never an httpx error) unless ``fallback="keep"``."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
from fake_rerank_server import MODEL, FakeRerankServer, cleared, fake_score, serve_module
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError, RerankError
from llama_index_rag_pack.rerank.endpoint_reranker import EndpointReranker
from llama_index_rag_pack.rerank.reranker_base import RERANK_SCORE_KEY
from llama_index_rag_pack.rerank.reranker_spec import make_reranker

rerank_server_module = pytest.fixture(scope="module")(serve_module)
rerank_server = pytest.fixture()(cleared)

QUERY = "What does the aardvark eat?"
TEXTS = [
    "The abacus is a calculating tool.",
    "The aardvark eats ants and termites.",
    "Apollo 11 landed on the Moon.",
    "Aikido is a Japanese martial art.",
    "What the aardvark does not eat: the Moon.",
]


def _nodes() -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(text=t, id_=f"n{i}", metadata={"title": f"t{i}"}), score=1.0)
        for i, t in enumerate(TEXTS)
    ]


def _expected_order() -> list[str]:
    return sorted(TEXTS, key=lambda t: -fake_score(QUERY, t))


def _rerank(reranker: EndpointReranker) -> list[NodeWithScore]:
    return reranker.postprocess_nodes(_nodes(), query_bundle=QueryBundle(QUERY))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("address", "api", "sent"),
    [
        ("/tei/rerank", "tei", {"query": QUERY, "texts": TEXTS, "truncate": True}),
        (
            f"/v1/rerank#{MODEL}",
            "cohere",
            {
                "model": MODEL,
                "query": QUERY,
                "documents": TEXTS,
                "top_n": 5,
                "return_documents": False,
            },
        ),
    ],
)
def test_the_order_follows_the_servers_scores(
    rerank_server: FakeRerankServer, address: str, api: str, sent: dict
) -> None:
    reranker = EndpointReranker(endpoint=rerank_server.url + address)
    ranked = _rerank(reranker)
    assert [n.node.text for n in ranked] == _expected_order()
    assert [n.score for n in ranked] == sorted((fake_score(QUERY, t) for t in TEXTS), reverse=True)
    assert all(n.node.metadata[RERANK_SCORE_KEY] == n.score for n in ranked)
    # the score is hidden from the LLM's and the embedder's text; the input nodes are unchanged
    assert RERANK_SCORE_KEY in ranked[0].node.excluded_llm_metadata_keys
    assert RERANK_SCORE_KEY in ranked[0].node.excluded_embed_metadata_keys
    assert reranker.api == api
    assert [r["body"] for r in rerank_server.requests] == [sent]
    original = _nodes()
    reranker.postprocess_nodes(original, query_bundle=QueryBundle(QUERY))
    assert all(RERANK_SCORE_KEY not in n.node.metadata and n.score == 1.0 for n in original)


@pytest.mark.slow
def test_the_api_is_found_from_the_answers_and_kept(rerank_server: FakeRerankServer) -> None:
    # /rerank without a prefix: TEI's body first; this server speaks Cohere's (as vLLM does)
    reranker = EndpointReranker(endpoint=rerank_server.url)  # no path: /rerank
    assert [n.node.text for n in _rerank(reranker)] == _expected_order()
    assert reranker.api == "cohere"
    assert [sorted(r["body"]) for r in rerank_server.requests] == [
        ["query", "texts", "truncate"],
        ["documents", "query", "return_documents", "top_n"],
    ]
    rerank_server.requests.clear()
    _rerank(reranker)  # the API found is kept: one request
    assert [sorted(r["body"]) for r in rerank_server.requests] == [
        ["documents", "query", "return_documents", "top_n"]
    ]


@pytest.mark.slow
def test_a_prefix_picks_the_api(rerank_server: FakeRerankServer) -> None:
    tei = EndpointReranker(endpoint=f"tei+{rerank_server.url}/rerank")
    with pytest.raises(RerankError, match=r"HTTP 400: 1 validation error: documents Field"):
        _rerank(tei)  # a Cohere-style server: the TEI body is refused, no other is tried
    assert len(rerank_server.requests) == 1
    cohere = make_reranker(f"cohere+{rerank_server.url}/rerank#{MODEL}")
    assert [n.node.text for n in _rerank(cohere)] == _expected_order()
    with pytest.raises(ConfigurationError, match="Unknown rerank API 'mxbai'"):
        EndpointReranker(endpoint=f"mxbai+{rerank_server.url}")


def test_batches_split_the_requests(rerank_server: FakeRerankServer) -> None:
    reranker = EndpointReranker(endpoint=f"{rerank_server.url}/tei/rerank", batch_size=2)
    assert [n.node.text for n in _rerank(reranker)] == _expected_order()
    assert [r["body"]["texts"] for r in rerank_server.requests] == [
        TEXTS[0:2],
        TEXTS[2:4],
        TEXTS[4:5],
    ]


@pytest.mark.slow
async def test_the_async_path_equals_the_sync_one(rerank_server: FakeRerankServer) -> None:
    for address in ("/tei/rerank", f"/v1/rerank#{MODEL}", ""):
        reranker = EndpointReranker(endpoint=rerank_server.url + address, batch_size=2)
        ranked = await reranker.apostprocess_nodes(_nodes(), query_bundle=QueryBundle(QUERY))
        assert [(n.node.text, n.score) for n in ranked] == [
            (n.node.text, n.score) for n in _rerank(reranker)
        ]


@pytest.mark.slow
def test_the_api_key_is_sent_as_a_bearer_token(
    rerank_server: FakeRerankServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_PACK_RERANK_API_KEY", "sk-rerank")
    _rerank(EndpointReranker(endpoint=f"{rerank_server.url}/tei/rerank"))
    monkeypatch.setenv("MY_KEY", "sk-mine")
    _rerank(EndpointReranker(endpoint=f"{rerank_server.url}/tei/rerank", api_key_env="MY_KEY"))
    monkeypatch.delenv("RAG_PACK_RERANK_API_KEY")
    _rerank(EndpointReranker(endpoint=f"{rerank_server.url}/tei/rerank"))
    auth = [r["headers"].get("Authorization") for r in rerank_server.requests]
    assert auth == ["Bearer sk-rerank", "Bearer sk-mine", None]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAILURES = [
    ("/fail/500", r"answered HTTP 500: CUDA out of memory$"),
    ("/v1/rerank#other/model", r"answered HTTP 404: The model `other/model` does not exist\.$"),
    ("/nowhere", r"answered HTTP 404: Not Found$"),
    ("/fail/malformed", r"answered malformed JSON"),
    ("/fail/out_of_range", r"answered index 5, not one of the 5 documents sent \(0 to 4\)\.$"),
    ("/fail/duplicate", r"scored document 0 twice\.$"),
    ("/fail/partial", r"scored 1 of the 5 documents sent \(none for index 1\)\.$"),
    ("/fail/huge", r"answered more than 1000000 bytes"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("address", "message"), FAILURES)
async def test_every_failure_is_one_rerank_error_line(
    rerank_server: FakeRerankServer, address: str, message: str
) -> None:
    reranker = EndpointReranker(
        endpoint=f"tei+{rerank_server.url}{address}", max_response_bytes=1_000_000
    )
    if "/v1/" in address:
        reranker = EndpointReranker(endpoint=rerank_server.url + address)
    for run in (
        lambda: _rerank(reranker),
        lambda: asyncio.run(  # the async path, in its own loop
            reranker.apostprocess_nodes(_nodes(), query_bundle=QueryBundle(QUERY))
        ),
    ):
        with pytest.raises(RerankError, match=message) as caught:
            await asyncio.to_thread(run)
        assert "\n" not in str(caught.value) and rerank_server.url in str(caught.value)
        context = caught.value.__context__
        assert caught.value.__cause__ is None
        assert context is None or caught.value.__suppress_context__  # no httpx error shown


@pytest.mark.slow
async def test_unreachable_and_timed_out_endpoints(rerank_server: FakeRerankServer) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/rerank"
    with pytest.raises(RerankError, match=f"^Cannot reach the rerank endpoint {url}"):
        _rerank(EndpointReranker(endpoint=url))
    with pytest.raises(RerankError, match=f"^Cannot reach the rerank endpoint {url}"):
        await EndpointReranker(endpoint=url).apostprocess_nodes(_nodes(), query_str=QUERY)
    slow = EndpointReranker(endpoint=f"tei+{rerank_server.url}/fail/slow", timeout=0.3)
    start = time.monotonic()
    with pytest.raises(RerankError, match=r"did not answer within 0\.3 s \(rerank timeout\)\.$"):
        _rerank(slow)
    with pytest.raises(RerankError, match=r"did not answer within 0\.3 s"):
        await slow.apostprocess_nodes(_nodes(), query_str=QUERY)
    assert time.monotonic() - start < rerank_server.slow_seconds * 2


@pytest.mark.slow
async def test_fallback_keep_logs_and_keeps_the_first_stage_order(
    rerank_server: FakeRerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    reranker = EndpointReranker(
        endpoint=f"tei+{rerank_server.url}/fail/500", fallback="keep", top_n=3
    )
    with caplog.at_level(logging.WARNING):
        kept = _rerank(reranker)
        akept = await reranker.apostprocess_nodes(_nodes(), query_bundle=QueryBundle(QUERY))
    assert [n.node.text for n in kept] == [n.node.text for n in akept] == TEXTS[:3]
    assert all(RERANK_SCORE_KEY not in n.node.metadata for n in kept)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "CUDA out of memory" in warnings[0]


def test_arguments_are_checked_when_made() -> None:
    with pytest.raises(ConfigurationError, match="neither an http"):
        EndpointReranker(endpoint="127.0.0.1:8080")
    with pytest.raises(ConfigurationError, match="batch_size must be an integer >= 1, got 0"):
        make_reranker("http://127.0.0.1:8080", batch_size=0)
    with pytest.raises(ConfigurationError, match="fallback must be one of raise, keep"):
        make_reranker("http://127.0.0.1:8080", fallback="ignore")
    with pytest.raises(ConfigurationError, match="Unknown rerank option 'retries'"):
        make_reranker("http://127.0.0.1:8080", retries=3)
    with pytest.raises(ConfigurationError, match="local:/nope': no such directory"):
        make_reranker("local:/nope")
    assert EndpointReranker(endpoint="https://api.example.com:443/v2/rerank#m").describe() == (
        "rerank endpoint https://api.example.com:443/v2/rerank (API found from the answers, "
        "model m)"
    )


def test_bad_option_values_and_urls_are_one_configuration_line() -> None:
    from llama_index_rag_pack.core.errors import ConfigurationError
    from llama_index_rag_pack.rerank.reranker_spec import make_reranker

    for spec, options, match in (
        ("http://127.0.0.1:9/rerank", {"timeout": 0}, "rerank option timeout=0"),
        ("http://127.0.0.1:9/rerank", {"timeout": "x"}, "rerank option timeout='x'"),
        ("http://[::1:80", {}, "is not a valid URL"),
    ):
        with pytest.raises(ConfigurationError, match=match) as caught:
            make_reranker(spec, **options)
        assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_a_key_that_cannot_be_sent_is_a_rerank_error(monkeypatch) -> None:
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from llama_index_rag_pack.core.errors import RerankError
    from llama_index_rag_pack.rerank.reranker_spec import make_reranker

    monkeypatch.setenv("RAG_PACK_RERANK_API_KEY", "clé-secrète")
    reranker = make_reranker("http://127.0.0.1:9/rerank", timeout=1)
    nodes = [NodeWithScore(node=TextNode(text="a"), score=1.0)]
    with pytest.raises(RerankError, match="ASCII"):
        reranker.postprocess_nodes(nodes, query_bundle=QueryBundle("q"))
