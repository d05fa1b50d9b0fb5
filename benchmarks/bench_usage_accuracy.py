"""Token usage of whole answers: the pack's ``metadata["usage"]`` against LlamaIndex core's
``TokenCountingHandler`` (the counter LlamaIndex's docs give), both against what the model itself
processed, on the same answers.

The LLM is the bundled SmolLM2-135M run by llama.cpp: every call's own prompt and completion
tokens are known exactly (llama.cpp reports them), so each answer's truth is the sum of the
counts of the calls made for it, read by a plain event handler. The pack reports its meter's
figures; core's ``TokenCountingHandler`` is attached to the LLM's callback manager as its docs
say, with its default tokenizer (tiktoken's ``cl100k_base``). Answers in three modes (one, two
and four LLM calls with a condensed chat turn), streamed and not, over English and Chinese
documents.

Usage: ``python benchmarks/bench_usage_accuracy.py [--questions 4]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DOCS = {
    "en": [
        "The Danube flows from the Black Forest to the Black Sea through ten countries.",
        "Vienna, Bratislava, Budapest and Belgrade are capitals on the Danube.",
        "Milvus is an open-source vector database released by Zilliz in 2019.",
        "The aardvark eats ants and termites, which it digs out at night.",
    ],
    "zh": [
        "长江是中国最长的河流，全长约六千三百公里，流入东海。",
        "三峡大坝位于长江上游，是世界上装机容量最大的水电站。",
        "大熊猫主要生活在四川、陕西和甘肃的山区，以竹子为食。",
        "故宫位于北京中心，是明清两代的皇家宫殿，现为博物院。",
    ],
}
QUESTIONS = {
    "en": [
        "Which capitals lie on the Danube?",
        "Who released Milvus?",
        "What does the aardvark eat?",
        "Where does the Danube end?",
    ],
    "zh": ["长江有多长？", "三峡大坝在哪里？", "大熊猫吃什么？", "故宫在哪里？"],
}
MODES = ("hybrid_convex", "hyde", "fusion")


class Truth:
    """The counts llama.cpp reported for each LLM call that ended (a plain event handler)."""

    def __init__(self) -> None:
        from llama_index.core.instrumentation import get_dispatcher
        from llama_index.core.instrumentation.event_handlers import BaseEventHandler
        from llama_index.core.instrumentation.events.llm import (
            LLMChatEndEvent,
            LLMCompletionEndEvent,
        )

        calls = self.calls = []

        class Handler(BaseEventHandler):
            @classmethod
            def class_name(cls) -> str:
                return "UsageTruth"

            def handle(self, event: Any, **kwargs: Any) -> None:
                if isinstance(event, LLMChatEndEvent | LLMCompletionEndEvent):
                    extra = event.response.additional_kwargs or {}
                    calls.append((extra["prompt_tokens"], extra["completion_tokens"]))

        get_dispatcher().add_event_handler(Handler())

    def take(self) -> tuple[int, int, int]:
        prompt, completion = sum(p for p, _ in self.calls), sum(c for _, c in self.calls)
        n = len(self.calls)
        self.calls.clear()
        return prompt + completion, n, prompt


def _answer(pack: Any, engine: Any, question: str, mode: str, stream: bool) -> Any:
    if mode == "chat":
        engine.reset()
        engine.chat(question)  # the first turn; its figures are not kept
        follow = (
            "请再说一遍。"
            if any("\u4e00" <= ch <= "\u9fff" for ch in question)
            else ("Can you say that again?")
        )
        return engine, follow
    return pack.make_query_engine(mode, streaming=stream, answer_style="generative"), question


def measure(pack: Any, llm: Any, questions: list[str], counter: Any, truth: Truth) -> list[dict]:
    rows = []
    chat = pack.make_chat_engine("hybrid_convex", answer_style="generative")
    for mode in (*MODES, "chat"):
        for stream in (False, True):
            for question in questions:
                engine, asked = _answer(pack, chat, question, mode, stream)
                truth.take()
                counter.reset_counts()
                if mode == "chat":
                    response = engine.stream_chat(asked) if stream else engine.chat(asked)
                else:
                    response = engine.query(asked)
                if stream:
                    "".join(response.response_gen)
                true_total, true_calls, _ = truth.take()
                usage = response.metadata["usage"]
                rows.append(
                    {
                        "mode": mode,
                        "stream": stream,
                        "true_total": true_total,
                        "true_calls": true_calls,
                        "pack_total": usage["total_tokens"],
                        "pack_calls": usage["llm_calls"],
                        "core_total": counter.total_llm_token_count,
                        "core_calls": len(counter.llm_token_counts),
                    }
                )
    return rows


def _summary(rows: list[dict], side: str) -> dict[str, float]:
    errors = [abs(r[f"{side}_total"] - r["true_total"]) / r["true_total"] for r in rows]
    return {
        "exact_share": sum(r[f"{side}_total"] == r["true_total"] for r in rows) / len(rows),
        "mean_abs_error": statistics.mean(errors),
        "max_abs_error": max(errors),
        "calls_right_share": sum(r[f"{side}_calls"] == r["true_calls"] for r in rows) / len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=4)
    add_out_argument(parser)
    args = parser.parse_args(argv)

    from llama_index.core import Document
    from llama_index.core.callbacks import CallbackManager, TokenCountingHandler

    from llama_index_rag_pack import RagPack
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
    from llama_index_rag_pack.models.settings import bundled_gguf_path

    truth = Truth()
    counter = TokenCountingHandler()  # core's recipe: tiktoken's cl100k_base
    llm = LocalGGUFLLM(model_path=bundled_gguf_path(), max_new_tokens=48).load()
    llm.callback_manager = CallbackManager([counter])
    results: dict[str, Any] = {}
    rows_by_language = {}
    for language, texts in DOCS.items():
        uri = str(Path(tempfile.mkdtemp(prefix="bench-usage-")) / "usage.db")
        docs = [Document(text=t, doc_id=f"{language}-{i}") for i, t in enumerate(texts)]
        pack = RagPack(docs, uri=uri, collection_name=f"usage_{language}", llm=llm)
        rows = measure(pack, llm, QUESTIONS[language][: args.questions], counter, truth)
        rows_by_language[language] = rows
        results[language] = {
            "pack": _summary(rows, "pack"),
            "core_token_counting_handler": _summary(rows, "core"),
            "answers": rows,
        }
    table_rows = []
    for language, rows in rows_by_language.items():
        for side, label in (
            ("pack", 'rag-pack `metadata["usage"]`'),
            ("core", "core `TokenCountingHandler`"),
        ):
            s = _summary(rows, side)
            table_rows.append(
                [
                    language,
                    label,
                    len(rows),
                    f"{100 * s['exact_share']:.0f}%",
                    f"{100 * s['mean_abs_error']:.1f}%",
                    f"{100 * s['max_abs_error']:.1f}%",
                    f"{100 * s['calls_right_share']:.0f}%",
                ]
            )
    table = md_table(
        [
            "documents",
            "side",
            "answers",
            "total tokens exact",
            "mean error",
            "worst error",
            "LLM calls right",
        ],
        table_rows,
        align="lllrrrr",
    )
    write_results(
        "usage_accuracy",
        results,
        [("An answer's tokens against what the model processed", table)],
        out=args.out,
        description=(
            "Each answer's total tokens as each side reports them, against the sum of the "
            "counts llama.cpp reported for the calls made for it (bundled SmolLM2-135M, 48 new "
            f"tokens at most). Modes {', '.join(MODES)} and a condensed chat turn, streamed "
            f"and not, {args.questions} questions each."
        ),
        notes=[
            "Core's `TokenCountingHandler` counts the text of each call with its tokenizer "
            "(tiktoken's `cl100k_base` by default), not what the model was sent: the chat "
            "template's tokens are missing and another model's tokenizer splits text "
            "differently, most for Chinese. The pack reads what the LLM reported, and counts "
            "only where it reported nothing.",
        ],
    )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
