"""OCR of scanned pages: seconds per page and word recall of each engine at each render dpi, and
the evidence behind the auto engine's choice and ``DEFAULT_OCR_DPI``.

Pages (``benchmarks/data/ocr/``, see its README): OCRmyPDF's scanned LinnSequencer leaflet
(English, with its transcription), and a French and a Chinese page rendered here from their
ground truth with a font, skewed, blurred, noised and thresholded to one bit like a fax-mode
scan (``--make-pages`` writes them again, byte for byte). Each page is rendered with PDFium at
150, 200, 250 and 300 dpi and read by ``ocr_image`` with ``engine="auto"``, ``"tesseract"`` and
``"rapidocr"``, ``--repeats`` times (the fastest and the median are reported: other work on the
machine only adds time). Word recall: the share of the ground truth's words (casefolded, NFKC,
punctuation stripped; each Han character a word) found in the OCR text, as a multiset.

Also measured: the first Tesseract reading's confidence and the script detection's answer and
time on each page (the auto rule's inputs), PP-OCR's model load, and Tesseract with its
OpenMP threads against one thread.

Run:  python benchmarks/bench_ocr.py [--repeats 3] [--dpis 150 200 250 300] [--make-pages]
      [--resume rows.jsonl]  (on a shared machine: rerun until every row was measured quietly)
Writes ``ocr.json`` and ``ocr.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

from _results import REPO_ROOT, add_out_argument, md_table, package_versions, write_results

DATA = REPO_ROOT / "benchmarks" / "data" / "ocr"
PAGES = {  # language: (page, ground truth)
    "English": ("linn.pdf", "linn.txt"),
    "French": ("french.pdf", "french.txt"),
    "Chinese": ("chinese.pdf", "chinese.txt"),
}
ENGINES = ("auto", "tesseract", "rapidocr")
DPIS = (150, 200, 250, 300)
TARGET_RECALL = 0.9
TARGET_SECONDS = 5.0
PACKAGES = (
    "rapidocr-onnxruntime",
    "onnxruntime",
    "opencv-python",
    "opencv-python-headless",
    "pyclipper",
    "shapely",
    "pypdfium2",
    "pillow",
    "numpy",
)
#: Fonts of the rendered pages (Debian: fonts-dejavu-core, fonts-noto-cjk).
FONTS = {
    "French": ("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf", 0, 42),
    "Chinese": ("/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc", 2, 38),
}
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]|[^\W\u3040-\u30ff\u3400-\u9fff]+")


def tokens(text: str) -> Counter[str]:
    """Words of ``text`` casefolded (NFKC), punctuation stripped; each Han or kana character
    is a word of its own."""
    return Counter(_TOKEN.findall(unicodedata.normalize("NFKC", text).casefold()))


def word_recall(truth: str, text: str) -> float:
    """The share of the ground truth's words found in ``text`` (as a multiset)."""
    expected, found = tokens(truth), tokens(text)
    return sum(min(n, found[w]) for w, n in expected.items()) / max(1, sum(expected.values()))


# --- the rendered pages ----------------------------------------------------------------------


def _wrap(text: str, font: Any, width: int, by_word: bool) -> list[str]:
    lines: list[str] = []
    for paragraph in text.split("\n"):
        current = ""
        for piece in paragraph.split() if by_word else paragraph:
            candidate = f"{current} {piece}".strip() if by_word else current + piece
            if current and font.getlength(candidate) > width:
                lines.append(current)
                current = piece
            else:
                current = candidate
        lines.append(current)
    return lines


def make_page(language: str) -> Path:
    """Render the ground truth of ``language`` as a one-bit 300-dpi letter page like a scan."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    path, index, size = FONTS[language]
    font = ImageFont.truetype(path, size, index=index)
    truth = (DATA / PAGES[language][1]).read_text(encoding="utf-8").strip()
    page = Image.new("L", (2550, 3300), 255)
    draw = ImageDraw.Draw(page)
    y = 300
    for line in _wrap(truth, font, 1950, by_word=language != "Chinese"):
        if line:
            draw.text((300, y), line, font=font, fill=20)
        y += int(size * 1.5) if line else size // 2
    page = page.rotate(0.35, resample=Image.Resampling.BICUBIC, fillcolor=255)
    page = page.filter(ImageFilter.GaussianBlur(0.8))
    noise = np.random.default_rng(len(truth)).normal(0, 10, (page.height, page.width))
    grey = np.clip(np.asarray(page, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
    scan = Image.fromarray(grey).point(lambda v: 255 if v > 150 else 0).convert("1")
    out = DATA / PAGES[language][0]
    fixed = time.gmtime(1767225600)  # 2026-01-01: the same bytes on every run
    scan.save(out, resolution=300, creationDate=fixed, modDate=fixed)
    return out


def render(pdf: Path, dpi: int) -> Any:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        return document[0].render(scale=dpi / 72, grayscale=True).to_pil().convert("L")
    finally:
        document.close()


# --- measuring -------------------------------------------------------------------------------


def wait_for_quiet(max_wait: float) -> float:
    """Wait (at most ``max_wait`` s) until the 1-minute load is below half the cores; returns
    the load measured on."""
    limit = (os.cpu_count() or 1) / 2
    ends = time.monotonic() + max_wait
    while os.getloadavg()[0] > limit and time.monotonic() < ends:
        time.sleep(5)
    return os.getloadavg()[0]


def _quiet_rows(path: str | None) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Rows measured by an earlier run into ``--resume`` on a quiet machine, to keep."""
    if not path or not Path(path).exists():
        return {}
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    quiet = (os.cpu_count() or 1) / 2
    return {(r["engine"], r["dpi"], r["language"]): r for r in rows if r["load_before"] <= quiet}


def measure(image: Any, engine: str, truth: str, repeats: int) -> dict[str, Any]:
    from llama_index_rag_pack.documents.pdf.ocr import ocr_image

    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = ocr_image(image, engine=engine, time_limit=600)
        runs.append((time.perf_counter() - started, result))
    seconds = [s for s, _ in runs]
    result = runs[0][1]
    return {
        "seconds_min": min(seconds),
        "seconds_median": statistics.median(seconds),
        "recall": word_recall(truth, result.text),
        "engine_used": result.engine,
        "confidence": result.confidence,
        "timed_out": any(r.timed_out for _, r in runs),
    }


def rule_inputs(images: dict[str, Any], truths: dict[str, str]) -> dict[str, Any]:
    """What the auto rule looks at on each page: the first (Latin) Tesseract reading's
    confidence and time, the script detection's answer and time, and the second reading, by
    Tesseract in that script's language, where the page's script is not Latin."""
    from llama_index_rag_pack.documents.pdf import ocr, ocr_engines

    out = {}
    for language, image in images.items():
        started = time.perf_counter()
        first = ocr_engines.run_tesseract(
            image, ocr.first_tesseract_languages(), time.monotonic() + 600
        )
        middle = time.perf_counter()
        script = ocr_engines.tesseract_script(image, time.monotonic() + 600)
        row = {
            "first_languages": ocr.first_tesseract_languages(),
            "first_confidence": first.confidence,
            "first_seconds": middle - started,
            "script": script,
            "script_seconds": time.perf_counter() - middle,
        }
        installed = ocr_engines.tesseract_languages()
        second = [lang for lang in ocr.SCRIPT_LANGUAGES.get(script or "", ()) if lang in installed]
        if second:
            started = time.perf_counter()
            read = ocr_engines.run_tesseract(image, second[0], time.monotonic() + 600)
            row["second"] = {
                "languages": second[0],
                "seconds": time.perf_counter() - started,
                "recall": word_recall(truths[language], read.text),
                "confidence": read.confidence,
            }
        out[language] = row
    return out


def tesseract_threads(image: Any) -> dict[str, float]:
    """Seconds of one Tesseract reading with OpenMP's default threads and with one."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    out = {}
    for label, limit in (("default", None), ("1", "1")):
        env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
        if limit:
            env["OMP_THREAD_LIMIT"] = limit
        started = time.perf_counter()
        command = ["tesseract", "stdin", "stdout", "-l", "eng"]
        subprocess.run(command, input=buffer.getvalue(), capture_output=True, env=env, check=True)
        out[label] = time.perf_counter() - started
    return out


def rapidocr_load_seconds() -> float:
    from PIL import Image

    from llama_index_rag_pack.documents.pdf.ocr import ocr_image

    started = time.perf_counter()
    ocr_image(Image.new("L", (64, 64), 255), engine="rapidocr")
    return time.perf_counter() - started


def choose_dpi(rows: list[dict[str, Any]]) -> int | None:
    """The lowest dpi at which the auto engine keeps every page's word recall >= 0.9."""
    for dpi in sorted({r["dpi"] for r in rows}):
        auto = [r for r in rows if r["dpi"] == dpi and r["engine"] == "auto"]
        if auto and all(r["recall"] >= TARGET_RECALL for r in auto):
            return dpi
    return None


# --- the report ------------------------------------------------------------------------------


def tables(results: dict[str, Any]) -> list[tuple[str, str]]:
    rows = results["runs"]
    header = ["engine", "dpi"]
    for language in PAGES:
        header += [f"{language} s/page", f"{language} recall"]
    body = []
    for engine in ENGINES:
        for dpi in sorted({r["dpi"] for r in rows}):
            cells: list[Any] = [engine, dpi]
            for language in PAGES:
                found = [
                    r
                    for r in rows
                    if (r["engine"], r["dpi"], r["language"]) == (engine, dpi, language)
                ]
                if not found:
                    cells += ["-", "-"]
                    continue
                r = found[0]
                used = "" if engine != "auto" else f" ({r['engine_used']})"
                cells += [
                    f"{r['seconds_min']:.2f} / {r['seconds_median']:.2f}",
                    f"{r['recall']:.3f}{used}",
                ]
            body.append(cells)
    rule = results["rule_inputs"]
    rule_rows = []
    for language, v in rule.items():
        second = v.get("second")
        rule_rows.append(
            [
                language,
                v["first_languages"],
                f"{v['first_confidence']:.1f}" if v["first_confidence"] is not None else "-",
                f"{v['first_seconds']:.2f}",
                v["script"] or "-",
                f"{v['script_seconds']:.2f}",
                f"{second['languages']}: {second['seconds']:.2f} s, recall {second['recall']:.3f}"
                if second
                else "-",
            ]
        )
    threads = results["tesseract_threads"]
    return [
        (
            "Seconds per page (fastest / median) and word recall, 2 cores",
            md_table(header, body, "ll" + "rr" * len(PAGES)),
        ),
        (
            f"The auto rule's inputs at {results['rule_dpi']} dpi",
            md_table(
                [
                    "page",
                    "first languages",
                    "mean word confidence",
                    "s",
                    "script (--psm 0)",
                    "s",
                    "second reading",
                ],
                rule_rows,
                "llrrlrl",
            ),
        ),
        (
            "Tesseract's OpenMP threads (English page, 200 dpi)",
            md_table(
                ["OMP_THREAD_LIMIT", "s/page"], [[k, f"{v:.2f}"] for k, v in threads.items()], "lr"
            ),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dpis", type=int, nargs="+", default=list(DPIS))
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument(
        "--make-pages", action="store_true", help="render the French and Chinese pages again"
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=600.0,
        help="seconds to wait for a quiet machine (1-minute load below half the cores) before "
        "each measurement",
    )
    parser.add_argument(
        "--resume",
        metavar="FILE",
        help="append each measured row to FILE, and keep the rows FILE already holds that were "
        "measured on a quiet machine (a run on a shared machine, in several sittings)",
    )
    add_out_argument(parser)
    args = parser.parse_args()
    from llama_index_rag_pack.documents.pdf import ocr, ocr_engines

    for language in ("French", "Chinese"):
        if args.make_pages or not (DATA / PAGES[language][0]).exists():
            print(f"rendered {make_page(language)}", flush=True)
    load = rapidocr_load_seconds() if "rapidocr" in ocr.available_engines() else None
    runs = []
    kept, reused = _quiet_rows(args.resume), 0
    for dpi in args.dpis:
        for language, (pdf, txt) in PAGES.items():
            image, truth = render(DATA / pdf, dpi), (DATA / txt).read_text(encoding="utf-8")
            for engine in args.engines:
                if (engine, dpi, language) in kept:
                    runs.append(kept[engine, dpi, language])
                    reused += 1
                    continue
                load_avg = wait_for_quiet(args.quiet_wait)
                row = {"engine": engine, "dpi": dpi, "language": language, "load_before": load_avg}
                row.update(measure(image, engine, truth, args.repeats))
                runs.append(row)
                if args.resume:
                    with open(args.resume, "a", encoding="utf-8") as rows:
                        rows.write(json.dumps(row) + "\n")
                print(
                    f"{engine:9s} {dpi} {language:8s} {row['seconds_min']:6.2f} s "
                    f"recall {row['recall']:.3f} ({row['engine_used']}, load {load_avg:.1f})",
                    flush=True,
                )
    rule_dpi = choose_dpi(runs) or ocr.DEFAULT_OCR_DPI
    wait_for_quiet(args.quiet_wait)
    images = {language: render(DATA / pdf, rule_dpi) for language, (pdf, _) in PAGES.items()}
    truths = {
        language: (DATA / txt).read_text(encoding="utf-8") for language, (_, txt) in PAGES.items()
    }
    version = subprocess.run(["tesseract", "--version"], capture_output=True, text=True)
    results = {
        "runs": runs,
        "chosen_dpi": choose_dpi(runs),
        "default_ocr_dpi": ocr.DEFAULT_OCR_DPI,
        "rule_dpi": rule_dpi,
        "rule_inputs": rule_inputs(images, truths),
        "tesseract_threads": tesseract_threads(render(DATA / "linn.pdf", 200)),
        "rapidocr_load_s": load,
        "engines": ocr.available_engines(),
        "tesseract": (version.stdout or version.stderr).splitlines()[0],
        "tesseract_languages": list(ocr_engines.tesseract_languages()),
        "versions": package_versions(PACKAGES),
        "repeats": args.repeats,
    }
    auto_at = {
        r["language"]: r
        for r in runs
        if r["engine"] == "auto" and r["dpi"] == results["chosen_dpi"]
    }
    notes = [
        f"Chosen dpi (lowest at which auto keeps every page's word recall >= {TARGET_RECALL}): "
        f"{results['chosen_dpi']}; `DEFAULT_OCR_DPI` is {ocr.DEFAULT_OCR_DPI}. Auto at that dpi: "
        + ", ".join(f"{k} {v['seconds_median']:.2f} s/page" for k, v in auto_at.items())
        + f" (target <= {TARGET_SECONDS:g} s).",
        f"{results['tesseract']} with {', '.join(results['tesseract_languages'])}; PP-OCR model "
        f"load {load or 0:.2f} s (once per process, not in the table). Versions: "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v != "not installed")
        + ".",
        f"{reused} of {len(runs)} rows were measured by an earlier sitting of this command "
        "(`--resume`: only rows measured on a quiet machine are kept)."
        if reused
        else "",
        "Recall counts words, so PP-OCR's Latin text, which runs many words together "
        "(`Operationissimilartomulti-track`), scores low on English and French although most "
        "letters are right; the auto engine reads Latin with Tesseract.",
    ]
    write_results(
        "ocr",
        results,
        tables(results),
        out=args.out,
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        notes=[note for note in notes if note],
    )


if __name__ == "__main__":
    main()
