"""The two OCR engines behind :func:`~llama_index_rag_pack.documents.pdf.ocr.ocr_image`.

Tesseract runs as a subprocess (the ``tesseract`` binary, one OpenMP thread: on a small
machine its thread pool made a page 5-6x slower), killed at the page's deadline. PP-OCR runs
in-process on ONNX Runtime through ``rapidocr-onnxruntime`` (its models ship in the wheel), its
detection and recognition steps driven here so that each step's ONNX run is stopped at the
deadline (``RunOptions.terminate``) and the lines read before it are kept. Lines come out in
reading order: rows top to bottom, and side-by-side columns one after the other.

Example:
    >>> order_boxes([(300, 0, 500, 10), (0, 0, 200, 10), (0, 20, 200, 30), (300, 20, 500, 30)])
    [1, 2, 0, 3]
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import io
import logging
import os
import re
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EngineRead",
    "cjk_share",
    "order_boxes",
    "rapidocr_installed",
    "run_rapidocr",
    "run_tesseract",
    "tesseract_languages",
    "tesseract_script",
]

logger = logging.getLogger(__name__)

#: Characters of scripts written without spaces between words (Han, kana).
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
#: Recognition runs this many text lines at a time: the deadline is checked between runs.
_REC_CHUNK = 12
#: Longest side of the image PP-OCR's detector sees (measured: no line lost at 150-300 dpi,
#: detection 2-3x faster than at the full page).
_DET_SIDE = 1280


@dataclass(frozen=True)
class EngineRead:
    """What one engine read from one image.

    Attributes:
        text: Lines in reading order, joined with newlines (paragraphs with a blank line).
        confidence: Mean confidence of the words (Tesseract) or lines (PP-OCR), 0-100;
            ``None`` when nothing was read.
        timed_out: The deadline passed before the engine finished.
    """

    text: str
    confidence: float | None
    timed_out: bool = False


def _join_words(words: Sequence[str]) -> str:
    """Words of one line, with a space unless both sides are Han or kana."""
    out = ""
    for word in words:
        if out and not (_UNSPACED.match(out[-1]) and _UNSPACED.match(word[0])):
            out += " "
        out += word
    return out


def cjk_share(text: str) -> float:
    """The share of Han and kana among the letters and digits of ``text``."""
    letters = [c for c in text if c.isalnum()]
    return sum(bool(_UNSPACED.match(c)) for c in letters) / len(letters) if letters else 0.0


# --- Tesseract ---------------------------------------------------------------------------


def _tesseract_binary() -> str | None:
    return shutil.which("tesseract")


@functools.cache
def tesseract_languages() -> tuple[str, ...]:
    """The languages Tesseract has installed (``osd`` included), ``()`` without Tesseract."""
    binary = _tesseract_binary()
    if binary is None:
        return ()
    try:
        done = subprocess.run(
            [binary, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        logger.warning("tesseract --list-langs failed: %s", e)
        return ()
    lines = done.stdout.splitlines()
    return tuple(line.strip() for line in lines[1:] if line.strip()) if done.returncode == 0 else ()


def _tesseract(image: Any, args: Sequence[str], deadline: float) -> str | None:
    """Tesseract's stdout for ``image`` (``None`` when it failed); ``TimeoutError`` at the
    deadline (the process is killed)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    command = [_tesseract_binary() or "tesseract", "stdin", "stdout", *args]
    try:
        done = subprocess.run(
            command, input=buffer.getvalue(), capture_output=True, timeout=remaining, env=env
        )
    except subprocess.TimeoutExpired:
        raise TimeoutError from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        logger.debug("tesseract %s failed: %s", " ".join(args), reason[-1:] or done.returncode)
        return None
    return done.stdout.decode("utf-8", "replace")


def run_tesseract(image: Any, languages: str, deadline: float) -> EngineRead:
    """Read ``image`` (PIL) with Tesseract in ``languages`` (``"eng+fra"``) before
    ``deadline`` (``time.monotonic()``); a run killed at the deadline reads nothing."""
    try:
        tsv = _tesseract(image, ["-l", languages, "tsv"], deadline)
    except TimeoutError:
        return EngineRead("", None, timed_out=True)
    if tsv is None:
        logger.warning("Tesseract (-l %s) failed on a page: it reads as empty", languages)
    return _from_tsv(tsv or "")


def _from_tsv(tsv: str) -> EngineRead:
    """Text and mean word confidence of Tesseract's TSV output."""
    lines: dict[tuple[str, str, str], list[str]] = {}
    confidences = []
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) < 12 or cells[0] != "5" or not cells[11].strip():
            continue
        lines.setdefault((cells[2], cells[3], cells[4]), []).append(cells[11].strip())
        if float(cells[10]) >= 0:
            confidences.append(float(cells[10]))
    parts: list[str] = []
    paragraph = None
    for (block, par, _), words in lines.items():
        if paragraph is not None and paragraph != (block, par):
            parts.append("")
        parts.append(_join_words(words))
        paragraph = (block, par)
    mean = statistics.fmean(confidences) if confidences else None
    return EngineRead("\n".join(parts), mean)


def tesseract_script(image: Any, deadline: float) -> str | None:
    """The script Tesseract's orientation and script detection finds (``"Latin"``, ``"Han"``,
    ``"Japanese"``, ``"Cyrillic"``, ...), ``None`` when it cannot tell (too little text, no
    ``osd`` data); ``TimeoutError`` at the deadline."""
    if "osd" not in tesseract_languages():
        return None
    out = _tesseract(image, ["--psm", "0"], deadline)
    found = re.search(r"^Script: (\S+)", out or "", re.MULTILINE)
    return found.group(1) if found else None


# --- PP-OCR (rapidocr-onnxruntime) -----------------------------------------------------------


@functools.cache
def rapidocr_installed() -> bool:
    """Whether ``rapidocr-onnxruntime`` 1.4 or later (the steps driven here) is installed,
    checked without importing it."""
    from importlib import metadata, util

    try:
        version = tuple(int(p) for p in metadata.version("rapidocr-onnxruntime").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    if version < (1, 4):
        logger.warning("rapidocr-onnxruntime %s is too old for OCR: install 1.4 or later", version)
    return version >= (1, 4) and util.find_spec("onnxruntime") is not None


def _threads() -> int:
    """ONNX Runtime threads: ``OMP_NUM_THREADS`` when set, else this process's cores (at most
    4)."""
    chosen = os.environ.get("OMP_NUM_THREADS", "")
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


class _StoppableSession:
    """An ONNX Runtime session whose runs use the current :class:`RunOptions`, so that setting
    their ``terminate`` flag stops a run in progress."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.run_options: Any = None

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        return self.session.run(output_names, input_feed, run_options or self.run_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


_RAPIDOCR_LOCK = threading.Lock()  # one page at a time: the engine's runs share its threads
_rapidocr: tuple[Any, list[_StoppableSession]] | None = None


def _rapidocr_engine() -> tuple[Any, list[_StoppableSession]]:
    """The PP-OCR engine, loaded once per process (call with the lock held)."""
    global _rapidocr
    if _rapidocr is None:
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR(
            intra_op_num_threads=_threads(),
            inter_op_num_threads=1,
            det_limit_type="max",
            det_limit_side_len=_DET_SIDE,
        )
        stoppable = []
        for step in (engine.text_det.infer, engine.text_rec.session):
            step.session = _StoppableSession(step.session)
            stoppable.append(step.session)
        _rapidocr = (engine, stoppable)
        logger.info("Loaded PP-OCR (rapidocr-onnxruntime) on %d threads", _threads())
    return _rapidocr


@contextmanager
def _stopping_at(sessions: list[_StoppableSession], deadline: float) -> Iterator[Any]:
    """Runs of ``sessions`` inside stop when ``deadline`` passes; yields the run options."""
    import onnxruntime as ort

    options = ort.RunOptions()
    timer = threading.Timer(
        max(0.0, deadline - time.monotonic()), setattr, (options, "terminate", True)
    )
    for session in sessions:
        session.run_options = options
    timer.start()
    try:
        yield options
    finally:
        timer.cancel()
        for session in sessions:
            session.run_options = None


def run_rapidocr(image: Any, deadline: float) -> EngineRead:
    """Read ``image`` (PIL) with PP-OCR before ``deadline`` (``time.monotonic()``): the lines
    recognised before it, in reading order, with ``timed_out`` when it passed."""
    import numpy as np

    bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
    if not _RAPIDOCR_LOCK.acquire(timeout=max(0.0, deadline - time.monotonic())):
        return EngineRead("", None, timed_out=True)
    try:
        engine, sessions = _rapidocr_engine()
        with _stopping_at(sessions, deadline) as options:
            try:
                lines = _recognise(engine, bgr, deadline)
                timed_out = False
            except _Stopped as stopped:
                lines, timed_out = stopped.lines, True
            except Exception:
                if not options.terminate:
                    raise
                lines, timed_out = [], True
    finally:
        _RAPIDOCR_LOCK.release()
    kept = [(text, score) for text, score in lines if text.strip() and score >= engine.text_score]
    mean = 100 * statistics.fmean(s for _, s in kept) if kept else None
    return EngineRead("\n".join(t for t, _ in kept), mean, timed_out)


class _Stopped(Exception):
    def __init__(self, lines: list[tuple[str, float]]) -> None:
        self.lines = lines


def _recognise(engine: Any, bgr: Any, deadline: float) -> list[tuple[str, float]]:
    """PP-OCR's steps: detect text lines, put them in reading order, recognise them a chunk of
    similar widths at a time (padding to the widest of a chunk costs time and accuracy);
    ``_Stopped`` carries the lines read when time is up."""
    image, _, _ = engine.preprocess(bgr)
    image, _ = engine.maybe_add_letterbox(image, {})
    boxes, _ = engine.text_det(image)
    if boxes is None or len(boxes) == 0:
        return []
    bounds = [(b[:, 0].min(), b[:, 1].min(), b[:, 0].max(), b[:, 1].max()) for b in boxes]
    boxes = [boxes[i] for i in order_boxes(bounds)]
    # No angle classifier: on every benchmark page it turned 1-2 upright lines upside down
    # (up to 12% of the words lost); a page scanned upside down is not turned either.
    crops = engine.get_crop_img_list(image, boxes)
    by_width = sorted(range(len(crops)), key=lambda i: crops[i].shape[1] / crops[i].shape[0])
    read: dict[int, tuple[str, float]] = {}
    for start in range(0, len(crops), _REC_CHUNK):
        chunk = by_width[start : start + _REC_CHUNK]
        try:
            if time.monotonic() >= deadline:
                raise TimeoutError
            lines, _ = engine.text_rec([crops[i] for i in chunk])
        except Exception:
            if time.monotonic() >= deadline:
                raise _Stopped([read[i] for i in sorted(read)]) from None
            raise
        read.update(
            (i, (str(line[0]), float(line[1]))) for i, line in zip(chunk, lines, strict=True)
        )
    return [read[i] for i in sorted(read)]


# --- Reading order ---------------------------------------------------------------------------

Box = tuple[float, float, float, float]


def _rows(boxes: Sequence[Box], ids: list[int]) -> list[list[int]]:
    """``ids`` grouped into rows: a box joins the row it overlaps by half its height."""
    rows: list[tuple[float, float, list[int]]] = []
    for i in sorted(ids, key=lambda i: (boxes[i][1] + boxes[i][3]) / 2):
        top, bottom = boxes[i][1], boxes[i][3]
        if rows:
            row_top, row_bottom, members = rows[-1]
            overlap = min(bottom, row_bottom) - max(top, row_top)
            if overlap >= 0.5 * min(bottom - top, row_bottom - row_top):
                rows[-1] = (min(top, row_top), max(bottom, row_bottom), [*members, i])
                continue
        rows.append((top, bottom, [i]))
    return [sorted(members, key=lambda i: boxes[i][0]) for _, _, members in rows]


def _gutters(boxes: Sequence[Box], row: list[int], gap: float, width: float) -> list[float]:
    """The middles of the gaps of at least ``gap`` between the parts of a row, when every part
    is wide enough (a quarter of ``width``) to be a column of text, else ``[]``."""
    parts: list[list[float]] = []
    for i in row:
        x0, _, x1, _ = boxes[i]
        if parts and x0 - parts[-1][1] < gap:
            parts[-1][1] = max(parts[-1][1], x1)
        else:
            parts.append([x0, x1])
    if len(parts) < 2 or min(p[1] - p[0] for p in parts) < 0.25 * width:
        return []
    return [(a[1] + b[0]) / 2 for a, b in zip(parts, parts[1:], strict=False)]


def order_boxes(boxes: Sequence[Box]) -> list[int]:
    """Reading order of text boxes ``(x0, y0, x1, y1)``: rows top to bottom, left to right,
    except that rows split by the same wide gaps (columns of text) are read one column after
    the other, the rows just above that fit the columns (a heading beside a column's first
    line) included. Returns the box indices in order."""
    if not boxes:
        return []
    heights = sorted(b[3] - b[1] for b in boxes)
    gap = 0.6 * heights[len(heights) // 2]  # a column gutter: word gaps are ~0.3 line heights
    width = max(b[2] for b in boxes) - min(b[0] for b in boxes)
    runs: list[tuple[list[float], list[int]]] = []  # (gutters, ids): a row, or a block of rows

    def crosses(ids: list[int], gutters: list[float]) -> bool:
        return any(boxes[i][0] < g < boxes[i][2] for i in ids for g in gutters)

    for row in _rows(boxes, list(range(len(boxes)))):
        if runs and runs[-1][0] and not crosses(row, runs[-1][0]):
            runs[-1][1].extend(row)
            continue
        gutters = _gutters(boxes, row, gap, width)
        if gutters:
            while runs and not runs[-1][0] and not crosses(runs[-1][1], gutters):
                row = runs.pop()[1] + row
        runs.append((gutters, row))
    order: list[int] = []
    for gutters, ids in runs:
        column = {i: sum(boxes[i][0] >= g for g in gutters) for i in ids}
        order.extend(
            sorted(ids, key=lambda i: (column[i], boxes[i][1], boxes[i][0])) if gutters else ids
        )
    return order
