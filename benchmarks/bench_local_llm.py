"""The bundled SmolLM2-135M GGUF run by transformers (the old local backend: the file is
de-quantised into a float torch model) and by llama.cpp (``xllamacpp``, this pack's
``LocalGGUFLLM``), side by side in one run.

Each side runs in its own fresh process, one after the other (``--rounds`` times, alternating),
and measures: the model load; prompt processing (an 886-token prompt, one new token, prompt cache
off); generation (128 new tokens, end-of-sequence ignored); and 4 requests of 64 new tokens each,
sent at once from 4 threads (the old backend serialised generation with a lock; llama.cpp decodes
them together in parallel slots) and one after the other. Token counts come from each side's own
tokenizer (the same vocabulary). Greedy decoding everywhere.

Run:  python benchmarks/bench_local_llm.py [--rounds 2] [--llamacpp-threads 1 2]

Needs ``pip install gguf`` for the transformers side (skipped otherwise).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

PASSAGE = (
    "The Danube is the second-longest river in Europe, after the Volga in Russia. It flows "
    "through much of Central and Southeastern Europe, from the Black Forest into the Black Sea. "
    "A large and historically important river, it was once a frontier of the Roman Empire. In "
    "the 21st century, it connects ten European countries, running through their territories or "
    "marking a border. Originating in Germany, the Danube flows southeast for 2,850 km, passing "
    "through or bordering Austria, Slovakia, Hungary, Croatia, Serbia, Romania, Bulgaria, "
    "Moldova, and Ukraine. Among the many cities on the river are four national capitals: "
    "Vienna, Bratislava, Budapest, and Belgrade. Its drainage basin amounts to 817,000 square "
    "kilometres and extends into nine more countries. "
)
LONG_PROMPT = (
    "Read the passage and answer the question.\n\n" + PASSAGE * 5 + "\n\nQuestion: Which "
    "capitals lie on the Danube?"
)
STORY = "Write a long story about a dragon who learns to cook."
FOUR = [
    "Write a paragraph about rivers.",
    "Write a paragraph about mountains.",
    "Write a paragraph about cities.",
    "Write a paragraph about music.",
]


# --------------------------------------------------------------------------- worker sides


class TransformersSide:
    def __init__(self, path: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        p = Path(path)
        self.tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        self.model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name).eval()
        self.lock = threading.Lock()  # the old backend's generate lock
        import torch

        self.threads = torch.get_num_threads()

    def run(self, prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[int, int]:
        import torch

        text = self.tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        inputs = self.tok(text, return_tensors="pt", add_special_tokens=False)
        extra = {"min_new_tokens": max_tokens} if ignore_eos else {}
        with self.lock, torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=self.tok.eos_token_id,
                **extra,
            )
        n_prompt = inputs["input_ids"].shape[1]
        return n_prompt, out.shape[1] - n_prompt


class LlamaCppSide:
    def __init__(self, path: str, threads: int | None) -> None:
        from llama_index_rag_pack.models.local_llm import LocalGGUFLLM

        self.llm = LocalGGUFLLM(model_path=path, n_threads=threads).load()
        self.threads = self.llm._key()[3]

    def run(self, prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[int, int]:
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "cache_prompt": False,
            "ignore_eos": ignore_eos,
        }
        result = self.llm._server().handle_chat_completions(body)
        usage = result["usage"]
        return usage["prompt_tokens"], usage["completion_tokens"]


def worker(side_name: str, threads: int | None) -> dict[str, Any]:
    from llama_index_rag_pack.models.settings import bundled_gguf_path

    path = bundled_gguf_path()
    start = time.perf_counter()
    if side_name == "transformers":
        side: Any = TransformersSide(path)
    else:
        side = LlamaCppSide(path, threads)
    load_s = time.perf_counter() - start
    side.run("Hi", 1, False)  # warm-up

    start = time.perf_counter()
    n_prompt, _ = side.run(LONG_PROMPT, 1, False)
    prompt_s = time.perf_counter() - start

    start = time.perf_counter()
    side.run(STORY, 1, False)
    story_first_s = time.perf_counter() - start
    start = time.perf_counter()
    _, n_gen = side.run(STORY, 128, True)
    gen_total_s = time.perf_counter() - start
    gen_s = max(gen_total_s - story_first_s, 1e-9)

    def four(concurrent: bool) -> tuple[float, int]:
        counts: list[int] = [0] * len(FOUR)

        def one(i: int) -> None:
            counts[i] = side.run(FOUR[i], 64, True)[1]

        start = time.perf_counter()
        if concurrent:
            threads_ = [threading.Thread(target=one, args=(i,)) for i in range(len(FOUR))]
            for t in threads_:
                t.start()
            for t in threads_:
                t.join()
        else:
            for i in range(len(FOUR)):
                one(i)
        return time.perf_counter() - start, sum(counts)

    conc_s, conc_tokens = four(True)
    serial_s, _ = four(False)
    return {
        "threads": side.threads,
        "load_s": load_s,
        "prompt_tokens": n_prompt,
        "prompt_s": prompt_s,
        "prompt_tok_s": n_prompt / prompt_s,
        "gen_tokens": n_gen,
        "gen_s": gen_s,
        "gen_tok_s": (n_gen - 1) / gen_s,
        "four_concurrent_s": conc_s,
        "four_serial_s": serial_s,
        "four_tokens": conc_tokens,
    }


# --------------------------------------------------------------------------- driver


def run_worker(side: str, threads: int | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", side]
    if threads:
        cmd += ["--threads", str(threads)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{side} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2, help="runs per side (default 2)")
    parser.add_argument(
        "--llamacpp-threads",
        type=int,
        nargs="*",
        default=[],
        help="also run llama.cpp with these thread counts (default: only its default)",
    )
    add_out_argument(parser)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads)))
        return

    sides: list[tuple[str, str, int | None]] = []
    if importlib.util.find_spec("gguf") is not None:
        sides.append(("transformers", "transformers", None))
    sides.append(("llama.cpp", "llama.cpp", None))
    sides += [(f"llama.cpp, {n} threads", "llama.cpp", n) for n in args.llamacpp_threads]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in sides}
    loads: list[str] = []
    for r in range(args.rounds):
        for label, side, threads in sides:
            loads.append(_load_average())
            result = run_worker(side, threads)
            result["load_average_before"] = loads[-1]
            runs[label].append(result)
            print(
                f"round {r + 1} {label}: load {result['load_s']:.2f} s, "
                f"prompt {result['prompt_tok_s']:.0f} tok/s, gen {result['gen_tok_s']:.1f} tok/s, "
                f"4 at once {result['four_concurrent_s']:.1f} s (load avg {loads[-1]})",
                flush=True,
            )

    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[label])

    base = "transformers" if "transformers" in runs else None
    rows = []
    for label in runs:
        ratio = (
            f"{med(base, 'four_concurrent_s') / med(label, 'four_concurrent_s'):.1f}x"
            if base
            else "-"
        )
        rows.append(
            (
                label,
                runs[label][0]["threads"],
                f"{med(label, 'load_s'):.2f}",
                f"{med(label, 'prompt_tok_s'):.0f}",
                f"{med(label, 'gen_tok_s'):.1f}",
                f"{med(label, 'four_concurrent_s'):.1f}",
                f"{med(label, 'four_serial_s'):.1f}",
                ratio,
            )
        )
    table = md_table(
        [
            "backend",
            "threads",
            "load s",
            "prompt tok/s",
            "generation tok/s",
            "4 at once s",
            "4 one by one s",
            "4 at once vs transformers",
        ],
        rows,
        "lrrrrrrr",
    )
    write_results(
        "local_llm",
        {"rounds": args.rounds, "runs": runs},
        [("SmolLM2-135M-Instruct Q4_1 on CPU (medians over rounds)", table)],
        out=args.out,
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        notes=[
            f"Load average (1, 5, 15 min) before each side's run: {', '.join(loads)}. The "
            "machine was shared with other jobs: compare the sides of one run, not absolute "
            "times across runs. llama.cpp's default thread count is half the cores (1 here); its "
            "threads wait for each other at every step, so on a busy machine a second thread "
            "can cost more than it brings (`--llamacpp-threads 2` measures it).",
        ],
        headline_packages=("xllamacpp", "transformers", "torch"),
    )


if __name__ == "__main__":
    main()
