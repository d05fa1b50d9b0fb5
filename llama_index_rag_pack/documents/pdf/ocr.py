"""Offline OCR of scanned pages and image files: which engine reads a page, within a time limit,
and a disk cache of what was read.

Two offline engines: Tesseract (the ``tesseract`` binary and its installed languages) and PP-OCR
(``rapidocr-onnxruntime``, Chinese and Latin models in the wheel). ``engine="auto"`` picks per
page, by measurement (``benchmarks/results/ocr.md``): Tesseract first, in the installed
Latin-script languages, as it keeps the spaces between words (PP-OCR drops many:
``extremelypowerful,yetamazingly``) and is 1.7-3x faster. Only when its mean word confidence
is low (Latin pages 95-96, a Chinese page read as English 32) does its script detection
(``--psm 0``, ~0.6 s) name the script: the page is read again by Tesseract in that script's
language when installed (``chi_sim`` read the Chinese page as well as PP-OCR, word recall 0.99
against 0.98, in half the time), else by PP-OCR for Han and Japanese. Without Tesseract, PP-OCR
reads every page.

Example:
    >>> OcrMode.parse("FORCE")
    <OcrMode.FORCE: 'force'>
    >>> OcrText("Hello", engine="tesseract", seconds=0.5).timed_out
    False
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import logging
import os
import re
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import read_json_file, write_json_atomic
from llama_index_rag_pack.documents.pdf import ocr_engines

__all__ = [
    "DEFAULT_OCR_DPI",
    "DEFAULT_PAGE_TIME_LIMIT",
    "ENGINES",
    "IMAGE_SUFFIXES",
    "MAX_IMAGE_PIXELS",
    "MAX_OCR_PIXELS",
    "OcrCache",
    "OcrMode",
    "OcrText",
    "OcrUnavailableError",
    "available_engines",
    "first_tesseract_languages",
    "ocr_image",
    "read_image_file",
]

logger = logging.getLogger(__name__)

DEFAULT_OCR_DPI = 200
"""Render resolution of a page for OCR (``benchmarks/results/ocr.md``): the auto engine with
Tesseract keeps word recall >= 0.9 from 150 dpi on the scanned English, French and Chinese pages
(0.97, 1.00, 0.99), but PP-OCR, which reads every page where Tesseract is not installed, needs
200 for 9-point Chinese (0.87 at 150, 0.98 at 200); 200 costs Tesseract about 12% more time
(3.0 s an English page on 2 cores)."""
MAX_OCR_PIXELS = 2550 * 3300
"""The most pixels a page image is read at (a US letter page at 300 dpi); larger images are
scaled down first."""
MAX_IMAGE_PIXELS = 100_000_000
"""The largest image file read (pixels of one frame): beyond, it is refused as a likely
decompression bomb (an A3 page scanned at 600 dpi is 70 million)."""
MAX_IMAGE_FRAMES = 1000  #: the most frames (pages) read from one TIFF file
DEFAULT_PAGE_TIME_LIMIT = 60.0
"""Seconds one page may take; the engine is stopped at the limit and what it read is kept."""
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff")  #: what read_image_file reads
ENGINES = ("auto", "tesseract", "rapidocr")  #: the values of ``ocr_image(engine=...)``
LOW_CONFIDENCE = 50.0
"""Below this mean word confidence of the first Tesseract reading, the page's script is checked
(measured: Latin pages 95-96, a Chinese page read as English 32)."""
#: Tesseract's first reading: the installed ones of these, at most three (each adds ~10-25%).
LATIN_LANGUAGES = ("eng", "fra", "deu", "spa", "ita", "por", "nld")
#: Tesseract languages for each script its script detection names.
SCRIPT_LANGUAGES = {
    "Han": ("chi_sim", "chi_tra"),
    "Japanese": ("jpn",),
    "Hangul": ("kor",),
    "Cyrillic": ("rus", "ukr", "bul", "srp"),
    "Greek": ("ell",),
    "Arabic": ("ara", "fas"),
    "Hebrew": ("heb",),
    "Devanagari": ("hin", "mar", "nep"),
    "Thai": ("tha",),
}
#: The scripts PP-OCR's bundled Chinese model reads (with Latin).
RAPIDOCR_SCRIPTS = ("Han", "Japanese")
_CACHE_VERSION = 1
_INSTALL = (
    "pip install 'llama-index-rag-pack[ocr]' (PP-OCR, Chinese and Latin scripts) or install "
    "Tesseract (apt install tesseract-ocr tesseract-ocr-fra ..., brew install tesseract)"
)


class OcrMode(Choice):
    """Which pages are read by OCR: ``auto`` the pages without a usable text layer, ``force``
    every page, ``off`` none (``OcrMode.parse`` takes any case; an unknown mode is a
    :class:`~llama_index_rag_pack.core.errors.ConfigurationError` listing the valid ones)."""

    AUTO = "auto"
    OFF = "off"
    FORCE = "force"

    @classmethod
    def label(cls) -> str:
        return "OCR mode"


@dataclass(frozen=True)
class OcrText:
    """The text OCR read from one page.

    Attributes:
        text: Lines in reading order joined with newlines, paragraphs with a blank line.
        engine: ``"tesseract"`` or ``"rapidocr"``.
        seconds: Wall time of the reading.
        timed_out: The page's time limit stopped the engine; ``text`` is what it read before.
        confidence: The engine's mean confidence, 0-100 (``None`` when nothing was read).
    """

    text: str
    engine: str
    seconds: float
    timed_out: bool = False
    confidence: float | None = None


class OcrUnavailableError(RuntimeError):
    """No OCR engine is installed (or not the one asked for); the message says what to install."""


@functools.cache
def available_engines() -> tuple[str, ...]:
    """The OCR engines installed: ``"tesseract"`` (the binary on ``PATH`` with at least one
    language) and ``"rapidocr"`` (``rapidocr-onnxruntime`` importable). Cheap: loads no model,
    asked once per process.

    Example:
        >>> set(available_engines()) <= {"tesseract", "rapidocr"}
        True
    """
    found = []
    languages = [lang for lang in ocr_engines.tesseract_languages() if lang != "osd"]
    if languages:
        found.append("tesseract")
        logger.info("Tesseract OCR languages: %s", ", ".join(languages))
    if ocr_engines.rapidocr_installed():
        found.append("rapidocr")
    return tuple(found)


def ocr_image(
    image: Any, *, engine: str = "auto", time_limit: float = DEFAULT_PAGE_TIME_LIMIT
) -> OcrText:
    """Read the text of one page image.

    Args:
        image: A PIL image (any mode); larger than :data:`MAX_OCR_PIXELS`, it is scaled down.
        engine: ``"auto"`` (chosen per page, see the module's description), ``"tesseract"``
            (Latin languages first, then the detected script's) or ``"rapidocr"`` (PP-OCR).
        time_limit: Seconds the page may take in all; the engine is stopped at the limit and
            what it read is returned with ``timed_out=True``.

    Returns:
        The text, the engine that read it, the seconds taken and its confidence.

    Raises:
        ValueError: an unknown ``engine`` or a ``time_limit`` that is not positive.
        OcrUnavailableError: no OCR engine, or not the one asked for, is installed.
    """
    if engine not in ENGINES:
        raise ValueError(f"Unknown OCR engine {engine!r}; valid engines: {', '.join(ENGINES)}.")
    if not 0 < time_limit < float("inf"):
        raise ValueError(f"time_limit must be a finite number > 0 seconds, got {time_limit!r}.")
    engines = available_engines()
    if not engines:
        raise OcrUnavailableError(f"no OCR engine installed: {_INSTALL}")
    if engine != "auto" and engine not in engines:
        raise OcrUnavailableError(f"the OCR engine {engine!r} is not installed: {_INSTALL}")
    started = time.monotonic()
    deadline = started + time_limit
    page = _fit(_normalised(image), MAX_OCR_PIXELS)
    if engine == "rapidocr" or "tesseract" not in engines:
        used, read = "rapidocr", ocr_engines.run_rapidocr(page, deadline)
    else:
        used, read = _tesseract_first(page, deadline, "rapidocr" in engines and engine == "auto")
    seconds = time.monotonic() - started
    if read.timed_out:
        logger.warning("OCR stopped at the time limit (%.1f s) by %s", time_limit, used)
    return OcrText(read.text, used, round(seconds, 3), read.timed_out, read.confidence)


def first_tesseract_languages() -> str:
    """Tesseract's first languages: ``$RAG_PACK_OCR_LANGUAGES`` (``"deu+eng"``), else up to
    three installed Latin-script ones, else every installed one."""
    chosen = os.environ.get("RAG_PACK_OCR_LANGUAGES", "").strip()
    if chosen:
        return chosen
    installed = [lang for lang in ocr_engines.tesseract_languages() if lang != "osd"]
    latin = [lang for lang in LATIN_LANGUAGES if lang in installed][:3]
    return "+".join(latin or installed[:1])


def _tesseract_first(
    page: Any, deadline: float, rapidocr: bool
) -> tuple[str, ocr_engines.EngineRead]:
    """Tesseract in Latin languages; on a low confidence, the page's script decides a second
    reading (Tesseract in that script's language, else PP-OCR when ``rapidocr``)."""
    first = ocr_engines.run_tesseract(page, first_tesseract_languages(), deadline)
    if first.timed_out or first.confidence is None or first.confidence >= LOW_CONFIDENCE:
        return "tesseract", first
    try:
        script = ocr_engines.tesseract_script(page, deadline)
    except TimeoutError:
        return "tesseract", replace(first, timed_out=True)
    installed = ocr_engines.tesseract_languages()
    languages = [lang for lang in SCRIPT_LANGUAGES.get(script or "", ()) if lang in installed]
    logger.debug("OCR confidence %.0f, script %s", first.confidence, script)
    if languages:
        second = ocr_engines.run_tesseract(page, languages[0], deadline)
        if second.timed_out:
            return "tesseract", replace(first, timed_out=True)
        better = (second.confidence or 0.0) > first.confidence
        return "tesseract", second if better else first
    if rapidocr and (script is None or script in RAPIDOCR_SCRIPTS):
        second = ocr_engines.run_rapidocr(page, deadline)
        if script is not None or ocr_engines.cjk_share(second.text) >= 0.3:
            return "rapidocr", second
        if second.timed_out:
            return "tesseract", replace(first, timed_out=True)
    elif script in SCRIPT_LANGUAGES:
        wanted = ", ".join(SCRIPT_LANGUAGES[script])
        logger.warning("An OCR page's script is %s: install Tesseract's %s", script, wanted)
    return "tesseract", first


class OcrCache:
    """OCR results on disk, one small JSON file per key, written atomically.

    The caller's key names the content read and how: e.g. the SHA-256 hex of the file's bytes,
    the page, the dpi and the engine choice. A file that cannot be read back is ignored (and
    rewritten by the next ``put``); a ``put`` that cannot write logs a warning.

    Args:
        directory: Where the files go: ``$RAG_PACK_OCR_CACHE``, else
            ``~/.cache/llama-index-rag-pack/ocr`` (``$XDG_CACHE_HOME`` when set).

    Example:
        >>> import tempfile
        >>> cache = OcrCache(tempfile.mkdtemp())
        >>> cache.put("ab" * 32, OcrText("Hello", "tesseract", 0.4))
        >>> cache.get("ab" * 32).text, cache.get("cd" * 32)
        ('Hello', None)
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        if directory is None:
            directory = os.environ.get("RAG_PACK_OCR_CACHE") or _default_cache_directory()
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        """The file of ``key`` (a hex digest, 16-128 characters).

        Raises:
            ValueError: a key that is not such a hex string.
        """
        if not re.fullmatch(r"[0-9a-f]{16,128}", key):
            raise ValueError(f"An OCR cache key must be a lowercase hex digest, got {key!r}.")
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> OcrText | None:
        """The result kept under ``key``, ``None`` when there is none or it is unreadable."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            data = read_json_file(path, what="an OCR cache entry", max_bytes=64 * 1024 * 1024)
            result = OcrText(**{f.name: data[f.name] for f in fields(OcrText)})
            if data["version"] != _CACHE_VERSION or not isinstance(result.text, str):
                raise ValueError("not an OCR result of this version")
            return result
        except (ConfigurationError, KeyError, TypeError, ValueError) as e:
            logger.warning("Ignoring the unreadable OCR cache file %s: %s", path, e)
            return None

    def put(self, key: str, result: OcrText) -> None:
        """Keep ``result`` under ``key``."""
        path = self.path(key)
        try:
            write_json_atomic(path, {"version": _CACHE_VERSION, **asdict(result)}, what="OCR")
        except ConfigurationError as e:
            logger.warning("OCR cache not written: %s", e)


def _default_cache_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llama-index-rag-pack" / "ocr"


def read_image_file(path: str | Path) -> list[Any]:
    """The pages of an image file (.png, .jpg, .jpeg, .tif, .tiff: one image per TIFF frame),
    in mode ``L`` or ``RGB``, turned upright by their EXIF orientation and scaled down to at
    most :data:`MAX_OCR_PIXELS`.

    Raises:
        ValueError: one line: not an image file of these kinds, a damaged file, or an image
            over :data:`MAX_IMAGE_PIXELS` (a decompression bomb).
    """
    from PIL import Image, ImageOps

    path = Path(path)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise ValueError(f"{path.name}: not an image file ({', '.join(IMAGE_SUFFIXES)})")
    pages = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                for index in range(min(getattr(image, "n_frames", 1), MAX_IMAGE_FRAMES)):
                    image.seek(index)
                    _check_size(path, image.size)
                    if image.format == "JPEG":
                        image.draft(image.mode, _target_size(image.size, MAX_OCR_PIXELS))
                    frame = ImageOps.exif_transpose(image) if index == 0 else image.copy()
                    pages.append(_fit(_normalised(frame), MAX_OCR_PIXELS))
    except Image.DecompressionBombError as e:
        raise ValueError(f"{path.name}: refused as a decompression bomb ({e})") from None
    except (OSError, SyntaxError, EOFError, ValueError) as e:
        if isinstance(e, ValueError) and str(e).startswith(f"{path.name}:"):
            raise
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ValueError(f"{path.name}: damaged or unreadable image ({reason})") from None
    return pages


def _check_size(path: Path, size: tuple[int, int]) -> None:
    width, height = size
    if width * height > MAX_IMAGE_PIXELS:
        raise ValueError(
            f"{path.name}: refused as a decompression bomb ({width}x{height} pixels, more than "
            f"{MAX_IMAGE_PIXELS})"
        )


def _target_size(size: tuple[int, int], max_pixels: int) -> tuple[int, int]:
    width, height = size
    scale = min(1.0, (max_pixels / (width * height)) ** 0.5)
    return max(1, int(width * scale)), max(1, int(height * scale))


def _fit(image: Any, max_pixels: int) -> Any:
    """``image`` scaled down to at most ``max_pixels`` (area-averaged: strokes stay even)."""
    from PIL import Image

    target = _target_size(image.size, max_pixels)
    if target == image.size:
        return image
    return image.resize(target, Image.Resampling.BOX)


def _normalised(image: Any) -> Any:
    """``image`` in mode ``L`` or ``RGB``: transparency on white, 16-bit and float images
    stretched to 8 bits."""
    from PIL import Image

    if image.mode in ("L", "RGB"):
        return image
    if image.mode == "1":
        return image.convert("L")
    if image.mode in ("LA", "RGBA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        import numpy as np

        values = np.asarray(image, dtype=np.float64)
        low, high = float(values.min()), float(values.max())
        scaled = (values - low) * (255.0 / (high - low)) if high > low else values * 0 + 255
        return Image.fromarray(scaled.astype(np.uint8), mode="L")
    return image.convert("RGB")
