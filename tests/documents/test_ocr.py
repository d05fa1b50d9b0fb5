"""OCR of page images (``documents/pdf/ocr.py``) with the real engines on small rendered images,
so each test knows the text it should read: English read by the auto engine, a Chinese page read
by PP-OCR and by the auto engine, the time limit, the disk cache, image files (multi-page TIFF,
damaged files, decompression bombs) and the reading order of text boxes.

Tesseract is found on the machine, or installed with ``apt-get`` where the tests run as root on
Debian (as the browser tests find Chromium); PP-OCR needs ``rapidocr-onnxruntime`` (the
``[ocr]`` extra). A test whose engine or font is missing is skipped with the reason.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageFont

from llama_index_rag_pack.documents.pdf import ocr, ocr_engines
from llama_index_rag_pack.documents.pdf.ocr import (
    OcrCache,
    OcrMode,
    OcrText,
    OcrUnavailableError,
    ocr_image,
    read_image_file,
)

ENGLISH = [
    "The quick brown fox jumps over",
    "the lazy dog near the river bank",
    "while seven children watch quietly.",
]
CHINESE = [
    "递归抽象处理树组织检索是一种全新的技术",
    "它采用自下而上的方法对文本段进行聚类",
    "然后将聚类总结成更高层次的信息整合",
    "最终形成从原始文档到更抽象总结的树",
]
CJK_FONTS = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/System/Library/Fonts/PingFang.ttc",
)


def render(lines: Sequence[str], font: Any, size: tuple[int, int] | None = None) -> Image.Image:
    """Black text lines on a white grey image, like a clean scan."""
    height = int(font.size * 1.6)
    width = max(int(font.getlength(line)) for line in lines) + 2 * font.size
    image = Image.new("L", size or (width, height * len(lines) + font.size), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((font.size, font.size // 2 + i * height), line, font=font, fill=0)
    return image


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def latin_font(size: int = 32) -> Any:
    return ImageFont.load_default(size=size)


def cjk_font(size: int = 40) -> Any:
    found = next((path for path in CJK_FONTS if Path(path).is_file()), None)
    if found is None and shutil.which("fc-match"):
        done = subprocess.run(
            ["fc-match", "-f", "%{file}", ":lang=zh-cn"], capture_output=True, text=True
        )
        found = done.stdout.strip() if done.stdout.strip().endswith((".ttc", ".otf")) else None
    if found is None:
        pytest.skip("no font with Chinese characters here (apt install fonts-noto-cjk)")
    return ImageFont.truetype(found, size, index=2 if "NotoS" in found else 0)


def _engines_again() -> None:
    ocr_engines.tesseract_languages.cache_clear()
    ocr.available_engines.cache_clear()


def find_or_install_tesseract() -> None:
    """Tesseract with English: found, or installed from Debian's packages (as root)."""
    if "eng" in ocr_engines.tesseract_languages():
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("no Tesseract here, and no apt-get as root to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [
        apt,
        "install",
        "-y",
        "--no-install-recommends",
        "tesseract-ocr",
        "tesseract-ocr-eng",
    ]
    for command in ([apt, "update"], install):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip(f"could not install Tesseract: {done.stderr.strip()[-300:]}")
    _engines_again()
    if "eng" not in ocr_engines.tesseract_languages():
        pytest.skip("Tesseract was installed but has no English data")


@pytest.fixture(scope="module")
def tesseract() -> None:
    find_or_install_tesseract()


@pytest.fixture(scope="module")
def rapidocr() -> None:
    pytest.importorskip(
        "rapidocr_onnxruntime", reason="rapidocr-onnxruntime is not installed (the [ocr] extra)"
    )


# --- modes, engines, errors --------------------------------------------------------------


def test_ocr_mode_parse_accepts_any_case_and_lists_the_valid_modes() -> None:
    assert OcrMode.parse("Force") is OcrMode.FORCE
    assert OcrMode.parse(OcrMode.OFF) is OcrMode.OFF
    with pytest.raises(ValueError, match="valid values: auto, off, force"):
        OcrMode.parse("sometimes")


def test_without_an_engine_the_error_says_what_to_install(monkeypatch: Any) -> None:
    monkeypatch.setattr(ocr, "available_engines", lambda: ())
    with pytest.raises(OcrUnavailableError) as caught:
        ocr_image(Image.new("L", (50, 20), 255))
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'llama-index-rag-pack[ocr]'" in message and "tesseract-ocr" in message


def test_an_engine_not_installed_or_unknown_is_refused(monkeypatch: Any) -> None:
    monkeypatch.setattr(ocr, "available_engines", lambda: ("rapidocr",))
    with pytest.raises(OcrUnavailableError, match="'tesseract' is not installed"):
        ocr_image(Image.new("L", (50, 20), 255), engine="tesseract")
    with pytest.raises(ValueError, match="valid engines: auto, tesseract, rapidocr"):
        ocr_image(Image.new("L", (50, 20), 255), engine="easyocr")
    for limit in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="time_limit must be a finite number > 0"):
            ocr_image(Image.new("L", (50, 20), 255), time_limit=limit)


def test_available_engines_are_known_names() -> None:
    assert set(ocr.available_engines()) <= {"tesseract", "rapidocr"}


# --- reading text --------------------------------------------------------------------------


def test_auto_reads_english_with_tesseract_and_keeps_the_spaces(tesseract: None) -> None:
    result = ocr_image(render(ENGLISH, latin_font()))
    expected = words(" ".join(ENGLISH))
    found = words(result.text)
    assert result.engine == "tesseract" and not result.timed_out
    assert sum(w in found for w in expected) >= 0.8 * len(expected), result.text
    assert len(result.text.splitlines()) == len(ENGLISH)  # one line each, in order
    assert result.confidence is not None and result.confidence > 50


def test_without_tesseract_auto_reads_english_with_pp_ocr(rapidocr: None, monkeypatch: Any) -> None:
    monkeypatch.setattr(ocr, "available_engines", lambda: ("rapidocr",))
    result = ocr_image(render(ENGLISH, latin_font()))
    letters = re.sub(r"\W", "", result.text.casefold())
    assert result.engine == "rapidocr"
    assert sum(w in letters for w in words(" ".join(ENGLISH))) >= 15, result.text
    assert result.text.splitlines()[0].casefold().startswith("the quick")  # reading order


def test_pp_ocr_reads_a_chinese_line(rapidocr: None) -> None:
    result = ocr_image(render(CHINESE[:1], cjk_font()), engine="rapidocr")
    assert result.engine == "rapidocr" and not result.timed_out
    assert sum(c in result.text for c in CHINESE[0]) >= 0.8 * len(CHINESE[0]), result.text


@pytest.mark.slow
@pytest.mark.parametrize("chi_sim", [True, False], ids=["tesseract-chi_sim", "pp-ocr"])
def test_auto_reads_a_chinese_page_in_its_script(
    tesseract: None, rapidocr: None, monkeypatch: Any, chi_sim: bool
) -> None:
    """English Tesseract reads Han with a low confidence: the page's script is checked and it
    is read again, by Tesseract's chi_sim when installed, else by PP-OCR."""
    installed = ocr_engines.tesseract_languages()
    if chi_sim and "chi_sim" not in installed:
        pytest.skip("Tesseract has no chi_sim here (apt install tesseract-ocr-chi-sim)")
    if not chi_sim:
        without = tuple(lang for lang in installed if lang != "chi_sim")
        monkeypatch.setattr(ocr_engines, "tesseract_languages", lambda: without)
    result = ocr_image(render(CHINESE, cjk_font()))
    expected = "".join(CHINESE)
    assert result.engine == ("tesseract" if chi_sim else "rapidocr")
    assert sum(c in result.text for c in expected) >= 0.8 * len(expected), result.text
    assert " " not in result.text.strip()  # no spaces between Han characters


def test_the_time_limit_stops_tesseract(tesseract: None) -> None:
    page = render(ENGLISH * 12, latin_font(28))
    started = time.monotonic()
    result = ocr_image(page, engine="tesseract", time_limit=0.05)
    assert result.timed_out
    assert time.monotonic() - started < 1.0


def test_the_time_limit_stops_pp_ocr(rapidocr: None) -> None:
    page = render(ENGLISH * 8, latin_font(28))
    ocr_image(Image.new("L", (40, 40), 255), engine="rapidocr")  # the model loads once
    started = time.monotonic()
    result = ocr_image(page, engine="rapidocr", time_limit=0.05)
    assert result.timed_out and result.engine == "rapidocr"
    assert time.monotonic() - started < 1.0


def test_a_page_larger_than_the_cap_is_scaled_down(monkeypatch: Any) -> None:
    seen = []

    def fake(image: Any, deadline: float) -> ocr_engines.EngineRead:
        seen.append(image.size)
        return ocr_engines.EngineRead("text", 90.0)

    monkeypatch.setattr(ocr, "available_engines", lambda: ("rapidocr",))
    monkeypatch.setattr(ocr_engines, "run_rapidocr", fake)
    result = ocr_image(Image.new("1", (6000, 4000), 1))
    assert result.text == "text" and seen[0][0] * seen[0][1] <= ocr.MAX_OCR_PIXELS


# --- the cache -----------------------------------------------------------------------------


def test_the_cache_round_trips_and_misses(tmp_path: Path) -> None:
    cache = OcrCache(tmp_path)
    result = OcrText("Bonjour\n\nle monde", "tesseract", 1.25, confidence=91.5)
    cache.put("a1" * 32, result)
    assert cache.get("a1" * 32) == result
    assert cache.get("b2" * 32) is None
    assert json.loads(cache.path("a1" * 32).read_text(encoding="utf-8"))["engine"] == "tesseract"


def test_a_corrupt_cache_file_is_ignored_and_rewritten(tmp_path: Path) -> None:
    cache = OcrCache(tmp_path)
    key = "c3" * 32
    for bad in ("{not json", '["a list"]', '{"version": 1, "text": 5}'):
        cache.path(key).parent.mkdir(parents=True, exist_ok=True)
        cache.path(key).write_text(bad, encoding="utf-8")
        assert cache.get(key) is None
    cache.put(key, OcrText("again", "rapidocr", 0.5))
    assert cache.get(key) == OcrText("again", "rapidocr", 0.5)


def test_the_cache_directory_comes_from_the_environment(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("RAG_PACK_OCR_CACHE", str(tmp_path / "ocr"))
    assert OcrCache().directory == tmp_path / "ocr"
    with pytest.raises(ValueError, match="hex digest"):
        OcrCache().path("../../etc/passwd")


def test_a_cache_that_cannot_be_written_only_warns(tmp_path: Path, caplog: Any) -> None:
    (tmp_path / "file").write_text("", encoding="utf-8")
    OcrCache(tmp_path / "file").put("d4" * 32, OcrText("x", "tesseract", 0.1))
    assert "OCR cache not written" in caplog.text


# --- image files ---------------------------------------------------------------------------


def test_a_multi_page_tiff_gives_one_image_per_frame(tmp_path: Path) -> None:
    path = tmp_path / "scan.tiff"
    frames = [
        Image.new("1", (300, 200), 1),
        Image.new("RGBA", (200, 100)),
        Image.new("P", (90, 60)),
    ]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    pages = read_image_file(path)
    assert [p.size for p in pages] == [(300, 200), (200, 100), (90, 60)]
    assert all(p.mode in ("L", "RGB") for p in pages)
    assert pages[1].getpixel((0, 0)) == (255, 255, 255)  # transparency laid on white


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_an_enormous_image_is_scaled_down(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"big{suffix}"
    Image.new("L", (5000, 3000), 255).save(path)
    (page,) = read_image_file(path)
    assert page.size[0] * page.size[1] <= ocr.MAX_OCR_PIXELS
    assert abs(page.size[0] / page.size[1] - 5 / 3) < 0.01


def test_a_truncated_png_is_one_line_of_error(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    render(ENGLISH, latin_font()).save(buffer, format="PNG")
    path = tmp_path / "cut.png"
    path.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    with pytest.raises(ValueError, match=r"cut\.png: damaged or unreadable image") as caught:
        read_image_file(path)
    assert "\n" not in str(caught.value)


def _png_header(width: int, height: int) -> bytes:
    """A tiny PNG file claiming ``width`` x ``height`` grey pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("side", [100_000, 12_000])
def test_a_decompression_bomb_is_refused_in_one_line(tmp_path: Path, side: int) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_header(side, side))
    assert path.stat().st_size < 200
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"bomb\.png: refused as a decompression bomb") as caught:
        read_image_file(path)
    assert "\n" not in str(caught.value) and time.monotonic() - started < 1.0


def test_other_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an image file"):
        read_image_file(tmp_path / "notes.txt")
    (tmp_path / "fake.jpg").write_bytes(b"not a jpeg at all")
    with pytest.raises(ValueError, match="fake.jpg: damaged or unreadable image"):
        read_image_file(tmp_path / "fake.jpg")


def test_sixteen_bit_greys_are_stretched_to_eight_bits(tmp_path: Path) -> None:
    path = tmp_path / "grey16.png"
    image = Image.new("I;16", (64, 8))
    image.paste(60000, (32, 0, 64, 8))
    image.save(path)
    (page,) = read_image_file(path)
    assert page.mode == "L" and page.getpixel((0, 0)) == 0 and page.getpixel((40, 0)) == 255


# --- reading order -------------------------------------------------------------------------


def test_columns_are_read_one_after_the_other() -> None:
    title = (0, 0, 1000, 30)
    heading = (0, 60, 150, 90)  # beside the right column's first line
    left = [(0, 100 + 40 * i, 480, 130 + 40 * i) for i in range(3)]
    right = [(500, 60 + 40 * i, 1000, 90 + 40 * i) for i in range(4)]  # a 20-unit gutter
    footer = (0, 240, 1000, 270)
    boxes = [footer, *right, title, *left, heading]  # shuffled
    order = ocr_engines.order_boxes(boxes)
    assert [boxes[i] for i in order] == [title, heading, *left, *right, footer]


def test_a_table_row_of_short_cells_is_read_across() -> None:
    boxes = [(0, 0, 80, 30), (400, 0, 480, 30), (0, 40, 80, 70), (400, 40, 480, 70)]
    assert ocr_engines.order_boxes(boxes) == [0, 1, 2, 3]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 900), st.integers(0, 900), st.integers(5, 300), st.integers(5, 60)
        ),
        max_size=30,
    )
)
def test_reading_order_is_a_permutation(raw: list[tuple[int, int, int, int]]) -> None:
    boxes = [(x, y, x + w, y + h) for x, y, w, h in raw]
    assert sorted(ocr_engines.order_boxes(boxes)) == list(range(len(boxes)))
