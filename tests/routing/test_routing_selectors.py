"""SemanticSelector (real bundled embeddings) and LogicalSelector (scripted LLM replies)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from llama_index.core.base.base_selector import BaseSelector, SelectorResult
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.json_output import requested_json_schema
from llama_index_rag_pack.routing.logical_selector import LogicalSelector
from llama_index_rag_pack.routing.routes import Route, RouteSelection, RoutingError
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
from llama_index_rag_pack.testing import ScriptedLLM, ToolCallReply

ROUTES = [
    Route(
        "physics",
        "Questions about physics: forces, energy, light, gravity, black holes, quantum mechanics",
        ("What is a black hole?", "Why does a satellite stay in orbit?", "How does a laser work?"),
    ),
    Route(
        "math",
        "Questions about mathematics: algebra, geometry, calculus, proofs, probability",
        (
            "What is the derivative of x squared?",
            "Prove that the square root of 2 is irrational",
            "How do I solve a quadratic equation?",
        ),
    ),
    Route(
        "cooking",
        "Recipes and cooking techniques",
        ("How long should I boil an egg?", "How do I make bread dough rise?"),
    ),
]
CHOICES = [ToolMetadata(name=r.name, description=r.description) for r in ROUTES]


class CountingEmbedding:
    """Wraps the real model and counts calls (proves route texts are embedded once)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.text_calls = 0
        self.texts = 0
        self.query_calls = 0

    def get_text_embedding_batch(self, texts: list[str], **kw: Any) -> list[list[float]]:
        self.text_calls += 1
        self.texts += len(texts)
        return self.inner.get_text_embedding_batch(texts, **kw)

    async def aget_text_embedding_batch(self, texts: list[str], **kw: Any) -> list[list[float]]:
        self.text_calls += 1
        self.texts += len(texts)
        return await self.inner.aget_text_embedding_batch(texts, **kw)

    def get_query_embedding(self, q: str) -> list[float]:
        self.query_calls += 1
        return self.inner.get_query_embedding(q)

    async def aget_query_embedding(self, q: str) -> list[float]:
        self.query_calls += 1
        return await self.inner.aget_query_embedding(q)


@pytest.fixture()
def counting(embed_model: Any) -> CountingEmbedding:
    return CountingEmbedding(embed_model)


@pytest.fixture()
def semantic(counting: CountingEmbedding) -> SemanticSelector:
    return SemanticSelector(ROUTES, embed_model=counting, threshold=0.25)  # type: ignore[arg-type]


# =========================================================================== semantic
@pytest.mark.parametrize(
    ("query", "route"),
    [
        ("Why does the moon cause tides on Earth?", "physics"),
        ("What is the integral of sin(x)?", "math"),
        ("What temperature should I roast a chicken at?", "cooking"),
    ],
)
def test_semantic_routes_in_scope_queries(
    semantic: SemanticSelector, query: str, route: str
) -> None:
    result = semantic.route(query)
    assert isinstance(result, RouteSelection) and isinstance(result, SelectorResult)
    assert result.names == [route]
    assert result.ind == [r.name for r in ROUTES].index(route)
    assert "cosine" in result.reason and ">= threshold 0.250" in result.reason
    assert set(result.scores) == {"physics", "math", "cooking"}
    assert max(result.scores, key=result.scores.get) == route


@pytest.mark.slow
def test_semantic_out_of_scope_is_none_or_fallback(embed_model: Any) -> None:
    query = "Who won the football world cup in 1998?"
    none = SemanticSelector(ROUTES, embed_model=embed_model, threshold=0.25).route(query)
    assert none.selections == [] and none.names == [] and none.route is None
    assert "no route reached its threshold" in none.reply
    fb = SemanticSelector(
        ROUTES, embed_model=embed_model, threshold=0.25, fallback="cooking"
    ).route(query)
    assert fb.names == ["cooking"] and fb.fallback
    assert "fallback" in fb.reason and "< threshold" in fb.reason


@pytest.mark.slow
def test_route_texts_embedded_once_and_one_query_embedding_per_query(
    semantic: SemanticSelector, counting: CountingEmbedding
) -> None:
    n_texts = sum(len(r.texts()) for r in ROUTES)
    for q in ["What is a photon?", "Solve 2x + 3 = 7", "How do I fry an egg?", "What is a photon?"]:
        semantic.route(q)
    assert counting.texts == n_texts and counting.text_calls == 1
    assert semantic.text_embedding_count == n_texts
    assert counting.query_calls == 4
    # changing one route re-embeds only its new text
    semantic.set_routes(
        [*ROUTES[:2], Route("cooking", ROUTES[2].description, ("How do I bake a cake?",))]
    )
    semantic.route("How do I bake cookies?")
    assert counting.texts == n_texts + 1


async def test_semantic_async_matches_sync(semantic: SemanticSelector) -> None:
    for q in ["How heavy is a neutron star?", "What is 17 times 23?", "Best way to cook rice"]:
        sync = semantic.route(q)
        asy = await semantic.aroute(q)
        assert asy.names == sync.names
        assert asy.scores == pytest.approx(sync.scores)


def test_semantic_top_k_and_per_route_threshold(embed_model: Any) -> None:
    query = "How do I compute the trajectory of a thrown ball with calculus?"
    two = SemanticSelector(ROUTES, embed_model=embed_model, threshold=0.05, top_k=2).route(query)
    ranked = sorted(two.scores, key=two.scores.get, reverse=True)
    assert two.names == ranked[:2] and two.names[0] == "math"
    assert len(two.selections) == 2 and two.inds == [
        [r.name for r in ROUTES].index(n) for n in two.names
    ]
    strict = [
        Route(r.name, r.description, r.utterances, threshold=0.99 if r.name == "math" else None)
        for r in ROUTES
    ]
    one = SemanticSelector(strict, embed_model=embed_model, threshold=0.05, top_k=2).route(query)
    assert "math" not in one.names and one.names == ranked[1:3]
    assert one.reasons[0].endswith("threshold 0.050")


@pytest.mark.slow
def test_semantic_mean_vs_max_aggregation(embed_model: Any) -> None:
    query = "What is a black hole?"  # identical to one physics utterance
    mx = SemanticSelector(ROUTES, embed_model=embed_model, aggregation="max").route(query)
    mean = SemanticSelector(ROUTES, embed_model=embed_model, aggregation="mean").route(query)
    assert mx.scores["physics"] == pytest.approx(1.0, abs=1e-3)
    assert mean.scores["physics"] < mx.scores["physics"]
    assert mx.names == mean.names == ["physics"]


@pytest.mark.slow
def test_fit_thresholds_calibrates_out_of_scope(embed_model: Any) -> None:
    selector = SemanticSelector(ROUTES, embed_model=embed_model, threshold=0.0)
    labelled = [
        ("Why does the moon cause tides on Earth?", "physics"),
        ("How does a nuclear reactor produce energy?", "physics"),
        ("What is the area of a circle with radius 3?", "math"),
        ("What is the integral of sin(x)?", "math"),
        ("How do I caramelise onions?", "cooking"),
        ({"query": "What is a good marinade for tofu?", "route": "cooking"}),
        ("Who painted the Mona Lisa?", None),
        ("What is the capital of Australia?", None),
        ("Who won the football world cup in 1998?", None),
        {
            "query": "How do I compute the kinetic energy of a falling apple?",
            "route": ["physics", "math"],
        },
    ]
    report = selector.fit_thresholds(labelled)
    assert report.n_examples == 10
    assert report.accuracy_after >= report.accuracy_before
    assert report.accuracy_before < 1.0  # threshold 0 routes the out-of-scope queries somewhere
    assert report.accuracy_after >= 0.9
    assert selector.thresholds == report.thresholds
    assert selector.route("Who painted the Mona Lisa?").names == []
    assert selector.route("Why does the moon cause tides on Earth?").names == ["physics"]


def test_fit_thresholds_keeps_explicit_route_thresholds(embed_model: Any) -> None:
    routes = [
        Route(r.name, r.description, r.utterances, threshold=0.42 if r.name == "math" else None)
        for r in ROUTES
    ]
    selector = SemanticSelector(routes, embed_model=embed_model)
    selector.fit_thresholds([("What is a quark?", "physics"), ("Who was Napoleon?", None)])
    assert selector.thresholds["math"] == 0.42


CALIBRATION = [
    ("Why does the moon cause tides on Earth?", "physics"),
    ("How does a nuclear reactor produce energy?", "physics"),
    ("What is the speed of light in a vacuum?", "physics"),
    ("Why do magnets attract iron?", "physics"),
    ("What is the area of a circle with radius 3?", "math"),
    ("What is the integral of sin(x)?", "math"),
    ("How many ways can 5 people sit in a row?", "math"),
    ("Is 91 a prime number?", "math"),
    ("How do I caramelise onions?", "cooking"),
    ("What is a good marinade for tofu?", "cooking"),
    ("How long do I roast a chicken?", "cooking"),
    ("Who painted the Mona Lisa?", None),
    ("What is the capital of Australia?", None),
    ("Who won the football world cup in 1998?", None),
    ("How do I renew my passport?", None),
    ("Which bands played at Woodstock?", None),
]


@pytest.mark.slow
async def test_robust_fit_then_sync_and_async_select_agree(embed_model: Any) -> None:
    """threshold 0 routes every out-of-scope question; the default robust fit learns to say no,
    and select/aselect (core's entry points) and route/aroute use the fitted thresholds."""
    selector = SemanticSelector(ROUTES, embed_model=embed_model, threshold=0.0)
    report = selector.fit_thresholds(CALIBRATION)
    assert report.method == "robust" and report.fit is not None
    assert not report.fit.kept_default and report.fit.shrinkage < 1.0
    assert report.fit.cv_scores[report.fit.shrinkage] > report.fit.cv_scores[1.0]
    assert report.accuracy_before < report.accuracy_after
    assert selector.thresholds == report.thresholds
    assert all(t > 0.0 for t in selector.thresholds.values())
    for query, expected in [
        ("Who painted the Mona Lisa?", []),
        ("Which river flows through Paris?", []),
        ("Why does the moon cause tides on Earth?", ["physics"]),
        ("What is the derivative of x cubed?", ["math"]),
    ]:
        sync = selector.select(CHOICES, query)
        asy = await selector.aselect(CHOICES, query)
        assert sync.names == asy.names == expected, query
        assert asy.scores == pytest.approx(sync.scores)
        assert (await selector.aroute(query)).names == selector.route(query).names == expected
    # refitting is deterministic: the same data gives the same thresholds
    assert selector.fit_thresholds(CALIBRATION).thresholds == report.thresholds


@pytest.mark.slow
def test_fit_thresholds_methods_and_shrinkage(embed_model: Any) -> None:
    selector = SemanticSelector(ROUTES, embed_model=embed_model, threshold=0.0)
    kept = selector.fit_thresholds(CALIBRATION, shrinkage=1.0)
    assert kept.fit is not None and kept.fit.kept_default
    assert kept.thresholds == {"physics": 0.0, "math": 0.0, "cooking": 0.0}
    exact = selector.fit_thresholds(CALIBRATION, method="exact")  # the old exhaustive fit
    assert exact.method == "exact" and exact.fit is None
    assert exact.accuracy_after >= exact.accuracy_before
    assert selector.route("Who painted the Mona Lisa?").names == []
    with pytest.raises(ConfigurationError, match="valid values: robust, exact"):
        selector.fit_thresholds(CALIBRATION, method="greedy")
    with pytest.raises(ConfigurationError, match="valid values: balanced, accuracy"):
        selector.fit_thresholds(CALIBRATION, objective="f1")


def test_semantic_works_inside_core_router_retriever_choices(embed_model: Any) -> None:
    """Choices that are not configured routes are routed on their descriptions."""
    selector = SemanticSelector(embed_model=embed_model, threshold=0.1)
    result = selector.select(
        [
            ToolMetadata(name="astro", description="Astronomy: stars, planets, galaxies"),
            ToolMetadata(name="law", description="Law: courts, contracts, trials"),
        ],
        "How far away is the Andromeda galaxy?",
    )
    assert result.names == ["astro"]
    assert isinstance(selector, BaseSelector)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"routes": []}, "routes is empty"),
        ({"routes": [Route("a", "x"), Route("a", "y")]}, r"Duplicate route names \['a'\]"),
        ({"routes": ROUTES, "threshold": 1.5}, "threshold must be a cosine score"),
        ({"routes": ROUTES, "top_k": 0}, "top_k must be an integer >= 1, got 0"),
        ({"routes": ROUTES, "top_k": True}, "top_k must be an integer >= 1, got True"),
        ({"routes": ROUTES, "aggregation": "median"}, "valid values: max, mean"),
        ({"routes": ROUTES, "fallback": "poetry"}, "Fallback route 'poetry' is not among"),
        ({"routes": [{"name": "a", "descr": "x"}]}, r"Unknown route field\(s\) \['descr'\]"),
    ],
)
def test_semantic_bad_configuration(embed_model: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        SemanticSelector(embed_model=embed_model, **kwargs)


def test_route_validation_and_bad_choices(embed_model: Any) -> None:
    with pytest.raises(ConfigurationError, match="non-empty name"):
        Route("", "x")
    with pytest.raises(ConfigurationError, match="neither a description nor utterances"):
        Route("a")
    with pytest.raises(ConfigurationError, match="list of strings"):
        Route("a", utterances="one string")  # type: ignore[arg-type]
    selector = SemanticSelector(embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="No routes to choose from"):
        selector.select([], "q")
    with pytest.raises(ConfigurationError, match="Duplicate route names"):
        selector.select(
            [ToolMetadata(name="a", description="x"), ToolMetadata(name="a", description="y")], "q"
        )
    with pytest.raises(ConfigurationError, match="no routes of its own"):
        selector.route("q")
    with pytest.raises(ConfigurationError, match=r"name no route"):
        SemanticSelector(ROUTES, embed_model=embed_model).fit_thresholds([("q", "poetry")])


# =========================================================================== logical
def _logical(replies: Any, **kwargs: Any) -> tuple[LogicalSelector, ScriptedLLM]:
    llm_kwargs = {k: kwargs.pop(k) for k in ("forbid_sync", "function_calling") if k in kwargs}
    llm = ScriptedLLM(replies=replies, **llm_kwargs)
    return LogicalSelector(llm, **kwargs), llm


def test_logical_json_reply_keeps_reason_and_prompt_lists_routes() -> None:
    selector, llm = _logical(
        ['```json\n{"routes": ["math"], "reason": "It asks for a derivative."}\n```']
    )
    result = selector.select(CHOICES, "What is d/dx of x^3?")
    assert result.names == ["math"] and result.ind == 1
    assert result.reason == "It asks for a derivative."
    assert "routes" in result.reply
    prompt = llm.prompts[0]
    assert "1. physics: Questions about physics" in prompt and "3. cooking: Recipes" in prompt
    assert "What is d/dx of x^3?" in prompt


@pytest.mark.parametrize(
    ("reply", "route"),
    [
        ("The best data source is Cooking.", "cooking"),
        ("2", "math"),
        ("0", "physics"),
        ("Answer: 3", "cooking"),
        ("[{'choice': 1, 'reason': 'gravity'}]", "physics"),
    ],
)
def test_logical_tolerant_text_replies(reply: str, route: str) -> None:
    selector, _ = _logical([reply])
    assert selector.select(CHOICES, "q").names == [route]


@pytest.mark.parametrize(
    "reply",
    [
        "7",
        '{"route": "astrology"}',
        '{"routes": ["physics"',
        "I'm not sure, maybe physics or math.",
        "",
    ],
)
def test_logical_unusable_reply_goes_to_fallback_never_a_wrong_route(
    reply: str, caplog: Any
) -> None:
    selector, _ = (
        _logical([reply], fallback="cooking") if reply != '{"routes": ["physics"' else (None, None)
    )
    if selector is None:  # broken JSON that still names one route in prose is usable
        selector, _ = _logical([reply], fallback="cooking")
        assert selector.select(CHOICES, "q").names == ["physics"]
        return
    with caplog.at_level(logging.WARNING, logger="llama_index_rag_pack.routing.logical_selector"):
        result = selector.select(CHOICES, "q")
    assert result.names == ["cooking"] and result.fallback
    assert "fallback" in result.reason
    assert "named no valid route" in caplog.text


@pytest.mark.parametrize("reply", ["7", '{"route": "astrology"}', "maybe physics or math"])
def test_logical_unusable_reply_without_fallback_raises(reply: str) -> None:
    selector, _ = _logical([reply])
    with pytest.raises(RoutingError, match="named no valid route.*Configure fallback"):
        selector.select(CHOICES, "q")


def test_logical_raise_on_failure_even_with_fallback() -> None:
    selector, _ = _logical(["route number 9"], fallback="cooking", raise_on_failure=True)
    with pytest.raises(RoutingError, match=r"out of range for 3 routes"):
        selector.select(CHOICES, "q")


def test_logical_explicit_none() -> None:
    selector, _ = _logical(['{"routes": [], "reason": "This is about football."}'])
    result = selector.select(CHOICES, "Who won the world cup?")
    assert result.selections == [] and result.route is None
    selector, _ = _logical(["None of these sources fit."], fallback="physics")
    result = selector.select(CHOICES, "Who won the world cup?")
    assert result.names == ["physics"] and result.fallback


def test_logical_function_calling_uses_the_tool_call() -> None:
    selector, llm = _logical(
        [ToolCallReply("select_routes", {"routes": ["Physics"], "reason": "orbital mechanics"})],
        function_calling=True,
    )
    result = selector.select(CHOICES, "Why do planets orbit the sun?")
    assert result.names == ["physics"] and result.reason == "orbital mechanics"
    assert result.reply.startswith("select_routes(")


def test_logical_function_calling_hallucinated_route_and_plain_text_reply() -> None:
    selector, _ = _logical(
        [ToolCallReply("select_routes", {"routes": ["chemistry"]})],
        function_calling=True,
        fallback="math",
    )
    assert selector.select(CHOICES, "q").names == ["math"]
    # a function-calling model that answers in text instead: parsed like a text reply
    selector, _ = _logical(["I'd use the cooking source."], function_calling=True)
    assert selector.select(CHOICES, "q").names == ["cooking"]


async def test_logical_async_never_calls_sync_methods() -> None:
    selector, llm = _logical(['{"routes": ["cooking"], "reason": "recipe"}'], forbid_sync=True)
    result = await selector.aselect(CHOICES, "How do I make pancakes?")
    assert result.names == ["cooking"] and llm.call_count == 1
    selector, llm = _logical(
        [ToolCallReply("select_routes", {"routes": ["math"]})],
        forbid_sync=True,
        function_calling=True,
    )
    assert (await selector.aselect(CHOICES, "2+2?")).names == ["math"]


def test_logical_multi_select_and_prompt_override() -> None:
    selector, llm = _logical(['{"routes": ["physics", "math"], "reason": "both"}'], max_outputs=2)
    assert selector.select(CHOICES, "q").names == ["physics", "math"]
    assert "at most 2 source(s)" in llm.prompts[0]
    custom = PromptTemplate(
        "Routes:\n{context_list}\nQ: {query_str}\nPick {max_outputs}. e.g. {example_name}"
    )
    selector, llm = _logical(['{"routes": ["cooking"]}'])
    selector.update_prompts({"select_prompt": custom})
    assert selector.get_prompts()["select_prompt"].get_template() == custom.get_template()
    selector.select(CHOICES, "eggs?")
    assert llm.prompts[0].startswith("Routes:\n1. physics")


def test_logical_bad_configuration() -> None:
    llm = ScriptedLLM(replies=[])
    with pytest.raises(ConfigurationError, match="max_outputs must be an integer >= 1, got 0"):
        LogicalSelector(llm, max_outputs=0)
    with pytest.raises(ConfigurationError, match="Fallback route 'poetry' is not among"):
        LogicalSelector(llm, fallback="poetry").select(CHOICES, "q")
    with pytest.raises(ConfigurationError, match="No routes to choose from"):
        LogicalSelector(llm).select([], "q")
    with pytest.raises(ConfigurationError, match="Duplicate route names"):
        LogicalSelector(llm).select([CHOICES[0], CHOICES[0]], "q")
    assert llm.call_count == 0  # validation happens before any LLM call


class SchemaRecordingLLM(ScriptedLLM):
    """Records the JSON schema requested (``json_output``) around each call."""

    schemas: list[Any] = []

    def _next_reply(self, prompt: str) -> Any:
        self.schemas.append(requested_json_schema())
        return super()._next_reply(prompt)


async def test_logical_asks_for_json_naming_only_valid_routes_sync_and_async() -> None:
    reply = '{"routes": ["math"], "reason": "equations"}'
    llm = SchemaRecordingLLM(replies=[reply, reply])
    llm.schemas = []
    selector = LogicalSelector(llm, max_outputs=2)
    selector.select(CHOICES, "Solve x + 1 = 2")
    await selector.aselect(CHOICES, "Solve x + 1 = 2")
    names = [c.name for c in CHOICES]
    assert len(llm.schemas) == 2 and llm.schemas[0] == llm.schemas[1]
    routes = llm.schemas[0]["properties"]["routes"]
    assert routes["items"] == {"enum": names} and routes["maxItems"] == 2
    assert requested_json_schema() is None  # only around the selector's own call


@pytest.mark.slow
async def test_logical_with_real_local_llm_never_returns_an_invalid_route(local_llm: Any) -> None:
    """The local model is held to the routing JSON schema: every reply parses and names only
    declared routes (an empty list, "no route fits", goes to the fallback), sync and async."""
    selector = LogicalSelector(local_llm, fallback="cooking")
    for q in ["What is a black hole?", "How do I solve x^2 = 9?"]:
        for result in (selector.select(CHOICES, q), await selector.aselect(CHOICES, q)):
            assert len(result.names) == 1 and result.names[0] in {"physics", "math", "cooking"}
            assert result.ind == [c.name for c in CHOICES].index(result.names[0])
            chosen = json.loads(result.reply)["routes"]
            assert chosen == result.names if chosen else result.fallback
