"""Answers from the offline defaults: generative (the bundled SmolLM2-135M writes) against
extractive (the passages' own sentences under a short answer line), on held-out questions.

Questions: the ``wiki_qa_para`` dev and test splits (147 + 147 hand-written paraphrased
questions over the shipped Wikipedia articles; ``benchmarks/data/README.md``). The extractive
weights and span rules were fitted on dev; test was committed before any of it. Every question
is answered through ``RagPack.run`` with nothing configured: the default retrieval
(``hybrid_convex``, 4 chunks), the bundled LLM, the bundled embedding model, ``markers``
citations; only ``answer_style`` / ``short_answer`` change between rows.

Rows:

* ``generative (135M)``: ``answer_style="generative"``: what every answer was before ``auto``;
* ``extractive, rule line`` (**the default**: ``auto`` resolves to it for the bundled model);
* ``extractive, model line``: the bundled model picks the short line among the rule's best 3
  spans under a JSON schema;
* ``extractive, quotes only``: no short line;
* ``capable LLM (scripted)``: an LLM object that is not a small GGUF model, scripted to answer
  like a capable model (the gold answer, cited to the first retrieved chunk holding it, else
  "The passages do not say."): ``auto`` resolves to generative and its text is the answer,
  markers renumbered: the generative path real models take is unchanged.

Metrics per question: **containment** (a gold answer string in the answer text, quotes
included; ``response.answer``, the reference list excluded), **line** (the short answer line's
own containment; for generative answers the first sentence's), **F1** (token F1 of that line
against the short gold answers), **cited** (answers with at least one citation), **quote
precision** (the answer's cited lines whose text (markers, bullets and quote marks removed) is
found in the passage they cite, over all cited lines), **gold precision** (cited passages that
hold a gold answer, over cited passages), **p50 / p90 s** (one question at a time, retrieval
included, after one warm-up question).

Run:  python benchmarks/bench_offline_answers.py [--splits dev,test] [--cores 2]
      [--generative-limit N] [--cache-dir DIR] [--out benchmarks/results]

``--cores N`` pins the process to N CPUs before anything loads. Writes
``offline_answers.json`` and ``offline_answers.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TOP_K = 4
ROWS = (
    ("generative (135M)", {"answer_style": "generative"}),
    ("extractive, rule line (default)", {}),
    ("extractive, model line", {"answer_style": "extractive", "short_answer": "model"}),
    ("extractive, quotes only", {"answer_style": "extractive", "short_answer": "none"}),
    ("capable LLM (scripted)", {"capable": True}),
)
_MARKER = re.compile(r"\s*\[\d+\]\(id=(\d+)\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def open_pack(split: str, cache_dir: str | None) -> tuple[Any, list[Any]]:
    """The questions of ``split`` and a pack over the harness's cached index of their corpus,
    configured as ``RagPack`` is by default (4 chunks, the shipped fusion weights, the bundled
    LLM)."""
    from llama_index_rag_pack import FusionConfig
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import load_labelled_set

    kwargs = {"cache_dir": cache_dir} if cache_dir else {}
    harness = EvalHarness(load_labelled_set("wiki_qa_para", split=split), llm=None, **kwargs)
    pack = harness.prepare()
    pack.similarity_top_k = TOP_K
    pack.fusion_config = FusionConfig()
    pack.forget_engines()
    return pack, harness.examples()


class CapableLLM:
    """Builds the scripted replies of a capable model for one question at a time."""

    def __init__(self) -> None:
        from llama_index_rag_pack.testing import ScriptedLLM

        self.reply = "The passages do not say."
        self.llm = ScriptedLLM(replies=lambda prompt: self.reply)

    def prepare(self, example: Any, nodes: list[Any]) -> None:
        from llama_index_rag_pack.evaluation.metrics import answer_in_text

        for position, nws in enumerate(nodes, start=1):
            if answer_in_text(nws.node.get_content(), example.answers):
                self.reply = f"{example.answers[0]} [1](id={position})."
                return
        self.reply = "The passages do not say."


def cited_lines(marked: str) -> list[tuple[str, list[int]]]:
    """Each line (or sentence) of a marked answer with the context positions it cites."""
    out = []
    for line in marked.splitlines():
        for sentence in _SENTENCE_END.split(line) if not line.lstrip().startswith("-") else [line]:
            ids = [int(m) for m in _MARKER.findall(sentence)]
            text = _MARKER.sub("", sentence).strip().lstrip("-").strip().strip('"').strip()
            if text:
                out.append((text, ids))
    return out


def score(example: Any, response: Any, seconds: float) -> dict[str, Any]:
    from llama_index_rag_pack.evaluation.metrics import answer_in_text, token_f1

    answer = response.answer
    metadata = response.metadata or {}
    short = metadata.get("short_answer")
    if metadata.get("answer_style") != "extractive":
        short = _SENTENCE_END.split(_MARKER.sub("", answer).strip())[0]
    line = short or ""
    nodes = response.context_nodes
    texts = [" ".join(n.node.get_content().split()) for n in nodes]
    lines = cited_lines(metadata.get("marked_answer") or "")
    cited = [(text, ids) for text, ids in lines if ids]
    holding = sum(
        all(" ".join(text.split()) in texts[i - 1] for i in ids if 0 < i <= len(texts))
        for text, ids in cited
    )
    passages = {i for _, ids in cited for i in ids if 0 < i <= len(texts)}
    gold = sum(answer_in_text(texts[i - 1], example.answers) for i in passages)
    return {
        "contains": answer_in_text(answer, example.answers),
        "line_contains": bool(line) and answer_in_text(line, example.answers),
        "f1": token_f1(line, example.answers) if line else 0.0,
        "cited": bool(response.citations),
        "cited_lines": len(cited),
        "quote_holding": holding,
        "cited_passages": len(passages),
        "gold_passages": gold,
        "seconds": seconds,
        "style": metadata.get("answer_style", "generative"),
    }


def run_row(pack: Any, examples: list[Any], options: dict[str, Any]) -> list[dict[str, Any]]:
    """Every question answered one at a time: through ``pack.run`` (with ``answer_style``
    only), or through a ``CitedQueryEngine`` made as the pack makes its own (the pack's
    retriever, LLM and embedding model) with the row's engine options."""
    from llama_index.core.schema import QueryBundle

    from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine

    options = dict(options)
    capable = CapableLLM() if options.pop("capable", False) else None
    engine = None
    if capable is not None or "short_answer" in options:
        engine = CitedQueryEngine(
            pack.retriever(),
            capable.llm if capable is not None else pack.llm,
            embed_model=pack.embed_model,
            callback_manager=pack.callback_manager,
            **options,
        )
    pack.run(examples[0].question)  # warm-up: models loaded, caches filled
    rows = []
    for example in examples:
        start = time.perf_counter()
        if engine is None:
            response = pack.run(example.question, **options)
        else:
            nodes = engine.retrieve(QueryBundle(example.question))
            if capable is not None:
                capable.prepare(example, nodes)
            response = engine.respond(nodes, example.question)
        rows.append(score(example, response, time.perf_counter() - start))
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    seconds = sorted(r["seconds"] for r in rows)
    lines = sum(r["cited_lines"] for r in rows)
    passages = sum(r["cited_passages"] for r in rows)
    return {
        "questions": n,
        "containment": sum(r["contains"] for r in rows) / n,
        "line_containment": sum(r["line_contains"] for r in rows) / n,
        "f1": sum(r["f1"] for r in rows) / n,
        "cited": sum(r["cited"] for r in rows) / n,
        "quote_precision": sum(r["quote_holding"] for r in rows) / lines if lines else None,
        "gold_precision": sum(r["gold_passages"] for r in rows) / passages if passages else None,
        "p50_s": statistics.median(seconds),
        "p90_s": seconds[min(n - 1, int(0.9 * n))],
        "styles": sorted({r["style"] for r in rows}),
    }


def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", default="dev,test")
    parser.add_argument("--cores", type=int, default=2, help="pin to this many CPUs (0: all)")
    parser.add_argument(
        "--generative-limit",
        type=int,
        default=None,
        help="answer only the first N questions of a split with the 135M model (slow)",
    )
    parser.add_argument("--cache-dir", default=None)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    results: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "splits": {}}
    for split in args.splits.split(","):
        pack, examples = open_pack(split, args.cache_dir)
        split_results = {}
        for name, options in ROWS:
            chosen = examples
            if options.get("answer_style") == "generative" and args.generative_limit:
                chosen = examples[: args.generative_limit]
            started = time.perf_counter()
            rows = run_row(pack, chosen, options)
            split_results[name] = {**summary(rows), "wall_s": time.perf_counter() - started}
            print(split, name, {k: _fmt(v) for k, v in split_results[name].items()}, flush=True)
        results["splits"][split] = split_results
        results["llm"] = pack.describe()["llm"]
        results["answer_style_auto"] = pack.describe()["answer_style"]
    header = (
        "answers",
        "n",
        "containment",
        "line",
        "F1",
        "cited",
        "quote prec.",
        "gold prec.",
        "p50 s",
        "p90 s",
    )
    tables = []
    for split, table in results["splits"].items():
        rows = [
            (
                name,
                s["questions"],
                _fmt(s["containment"]),
                _fmt(s["line_containment"]),
                _fmt(s["f1"]),
                _fmt(s["cited"]),
                _fmt(s["quote_precision"]),
                _fmt(s["gold_precision"]),
                f"{s['p50_s']:.2f}",
                f"{s['p90_s']:.2f}",
            )
            for name, s in table.items()
        ]
        tables.append((f"`wiki_qa_para` {split}", md_table(header, rows, "lrrrrrrrrr")))
    tables.reverse()  # test first: the table the README quotes
    description = (
        f"Answers through `RagPack.run` with nothing configured (4 chunks, `hybrid_convex`, "
        f"bundled models: {results.get('llm')}; `auto` resolves to "
        f"{results.get('answer_style_auto')}), {results['cores']} CPU cores, one question at a "
        "time. containment: a gold answer in the answer text (quotes included); line: in the "
        "short answer line (generative: the first sentence); F1: token F1 of that line; cited: "
        "answers with a citation; quote prec.: cited lines found verbatim in the passage they "
        "cite; gold prec.: cited passages holding a gold answer."
    )
    write_results("offline_answers", results, tables, out=args.out, description=description)


if __name__ == "__main__":
    main()
