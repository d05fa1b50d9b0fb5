"""Make the Chinese PDFs of the PDF reading sets from the Chinese tutorials in
``benchmarks/data/zh_tutorials/``: two scanned pages (an image of the printed text, no text
layer) and two text PDFs (a real text layer in an embedded CJK font).

Scans: the paragraphs are drawn at 200 dpi on an A4 page in Noto Serif CJK SC, turned by less
than one degree, blurred a little and given paper noise, and saved as a grayscale JPEG inside a
PDF (Pillow). Text PDFs: the same kind of paragraphs set in WenQuanYi Zen Hei (a TrueType font)
with fpdf2, which embeds the subset of the font it uses. (fpdf2 with the CFF-outline Noto CJK
fonts writes a text layer that pypdf reads with a NUL between characters; a TrueType font gives
the text layer most Chinese PDFs have.) Everything is seeded: a run gives the same pages.

Needs Pillow, numpy and fpdf2 (not project dependencies: install them into any venv) and the
fonts (Debian/Ubuntu: ``apt-get install fonts-noto-cjk fonts-wqy-zenhei``; or ``--font-dir``).

Run from the repository root:  python benchmarks/data/pdfs/make_chinese_pdfs.py
Writes ``dev/zh_scan_milvus.pdf``, ``dev/zh_text_raptor.pdf``, ``test/zh_scan_rag_intro.pdf`` and
``test/zh_text_citations.pdf`` next to this script.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import re
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEEDS = HERE.parent / "zh_tutorials"
FONT_DIRS = ("/usr/share/fonts/opentype/noto", "/usr/share/fonts/truetype/wqy", "/usr/share/fonts")
SANS = "wqy-zenhei.ttc"  # face 0: WenQuanYi Zen Hei
SERIF = "NotoSerifCJK-Regular.ttc"
SC_INDEX = 2  # Simplified Chinese face in the Noto CJK collections (JP, KR, SC, TC, HK)
DPI = 200
A4_PX = (round(8.27 * DPI), round(11.69 * DPI))

# name -> (split, kind, seed file, title, the paragraphs: each found by its first characters)
PAGES: dict[str, tuple[str, str, str, str, list[str]]] = {
    "zh_scan_milvus": (
        "dev",
        "scan",
        "milvus-hybrid-retriever-notes.txt",
        "Milvus 向量数据库扫盲",
        [
            "索引模块的目的是",
            "在 Milvus 中，可以将",
            "  一个 collection 最多可以有",
            "Milvus 是[面向列]",
            "所以，VectorStore 的底层仍然是",
            "在完成安装后，在 Docker 启动的情况下",
            "这样 attu 就被部署到",
            "需要注意的是，Milvus 中存储的数据",
            "之前用的是 [Qdrant]",
            "这次决定使用 [Milvus]",
        ],
    ),
    "zh_text_raptor": (
        "dev",
        "chinese",
        "raptor-tutorial.txt",
        "RAPTOR：树组织检索的递归抽象处理",
        [
            "在传统的 RAG 中",
            "递归抽象处理树组织检索",
            "RAPTOR 的树状结构是其功能的核心",
            "此过程包括将文档分割成",
            "生成的总结构成了树的节点",
            "假设我们手头有8个文档块",
            "接着，我们用聚类算法",
            "- llm：zephyr",
            "- 嵌入模型",
            "- 聚类算法：GMM",
        ],
    ),
    "zh_scan_rag_intro": (
        "test",
        "scan",
        "rag-query-transformation-routing.txt",
        "第三章 RAG 第二部分：与数据聊天",
        [
            "在上一章中，你学习了",
            "RAG 是一种技术",
            "没有 RAG，LLM 完全依赖于",
            "LLM 的响应在事实上是不正确的",
            "一个 AI 应用的 RAG 系统通常遵循",
            "这个阶段涉及预处理外部数据源",
            "这个阶段涉及根据用户的查询",
            "这个阶段涉及将检索到的相关文档",
            "在第二章中详细介绍了",
        ],
    ),
    "zh_text_citations": (
        "test",
        "chinese",
        "citations-howto.txt",
        "如何让RAG应用程序添加引用",
        [
            "本指南回顾了",
            "1. 使用工具调用引用文档ID；",
            "2. 使用工具调用引用文档ID并提供文本片段；",
            "3. 直接提示；",
            "4. 检索后处理",
            "5. 生成后处理",
            "我们通常建议使用列表中",
            "要使用标识符引用文档",
            "首先，我们为输出定义一个模式",
        ],
    ),
}


def clean(text: str) -> str:
    """Markdown to plain text: links keep their words, emphasis, code marks and tags go."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"\^\(\d+\)|\[\^\d+\]", "", text)  # footnote marks
    text = text.replace("~~", "").replace("**", "").replace("`", "")
    text = re.sub(r"(?<!\w)\*|\*(?!\w)", "", text)
    return " ".join(text.split())


def paragraphs(seed: str, starts: list[str]) -> list[str]:
    """The paragraph (a line of the seed file) that begins with each of ``starts``."""
    lines = (SEEDS / seed).read_text(encoding="utf-8").splitlines()
    found = []
    for start in starts:
        line = next((x for x in lines if x.startswith(start)), None)
        if line is None:
            raise SystemExit(f"{seed}: no paragraph starts with {start!r}")
        found.append(clean(line))
    return found


def font_path(name: str, font_dir: str | None) -> str:
    for directory in (font_dir, *FONT_DIRS) if font_dir else FONT_DIRS:
        hits = sorted(Path(directory).rglob(name)) if Path(directory).is_dir() else []
        if hits:
            return str(hits[0])
    raise SystemExit(
        f"{name} not found: install fonts-noto-cjk and fonts-wqy-zenhei, or --font-dir"
    )


NO_LINE_START = set("，。、；：！？）」』”’》,.;:!?)")


def wrap(text: str, width: float, measure) -> list[str]:
    """Lines of at most ``width``: CJK text breaks between any two characters, other words
    (runs of Latin letters and digits) stay whole, and closing punctuation never starts a line
    (it hangs at the end of the one before)."""
    tokens = re.findall(r"[A-Za-z0-9_./:%'\-]+|\s+|.", text)
    lines, line = [], ""
    for token in tokens:
        if measure(line + token) <= width or not line or token in NO_LINE_START:
            line += token
            continue
        lines.append(line.rstrip())
        line = token.lstrip()
    if line.strip():
        lines.append(line.rstrip())
    return lines


def make_scan(path: Path, title: str, paras: list[str], font_file: str, seed: int) -> None:
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    rng = random.Random(seed)
    width, height = A4_PX
    margin = round(1.0 * DPI)
    body = ImageFont.truetype(font_file, round(11.5 / 72 * DPI), index=SC_INDEX)
    head = ImageFont.truetype(font_file, round(16 / 72 * DPI), index=SC_INDEX)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    y = margin
    title_w = draw.textlength(title, font=head)
    draw.text(((width - title_w) / 2, y), title, font=head, fill=20)
    y += round(head.size * 2.2)
    line_h = round(body.size * 1.75)
    indent = "\u3000\u3000"  # two ideographic spaces, as Chinese paragraphs are set
    for para in paras:
        for line in wrap(indent + para, width - 2 * margin, lambda s: draw.textlength(s, body)):
            if y + line_h > height - margin:
                raise SystemExit(f"{path.name}: the paragraphs do not fit on one page")
            draw.text((margin, y), line, font=body, fill=rng.randint(15, 40))
            y += line_h
        y += round(line_h * 0.35)
    page = page.rotate(rng.uniform(0.35, 0.8) * rng.choice((-1, 1)), fillcolor=255, resample=3)
    page = page.filter(ImageFilter.GaussianBlur(0.6))
    noise = np.random.default_rng(seed).normal(0, 7, (height, width))
    pixels = np.asarray(page, dtype=np.float32) + noise - 6  # a greyish sheet
    specks = np.random.default_rng(seed + 1).random((height, width)) < 0.0006
    pixels[specks] = 60
    scan = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "L")
    fixed = time.gmtime(1767225600)  # 2026-01-01 UTC: the same bytes each run
    scan.save(
        path, "PDF", resolution=DPI, quality=60, title=title, creationDate=fixed, modDate=fixed
    )


def make_text_pdf(path: Path, title: str, paras: list[str], font_file: str) -> None:
    from fpdf import FPDF

    pdf = FPDF(format="A4")
    pdf.set_creation_date(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))  # same bytes each run
    pdf.set_title(title)
    pdf.add_font("ZenHei", fname=font_file)
    pdf.set_margins(25, 25, 25)
    pdf.set_auto_page_break(True, margin=25)
    pdf.add_page()
    pdf.set_font("ZenHei", size=16)
    pdf.multi_cell(0, 10, title, align="C", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)
    pdf.set_font("ZenHei", size=11)
    for para in paras:  # wrapped here: CJK between any two characters, Latin words whole
        for line in wrap("\u3000\u3000" + para, pdf.epw, pdf.get_string_width):
            pdf.cell(0, 7, line, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    pdf.output(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--font-dir", help="where NotoSerifCJK-Regular.ttc and wqy-zenhei.ttc are")
    args = parser.parse_args()
    for i, (name, (split, kind, seed, title, starts)) in enumerate(PAGES.items()):
        paras = paragraphs(seed, starts)
        out = HERE / split / f"{name}.pdf"
        out.parent.mkdir(parents=True, exist_ok=True)
        if kind == "scan":
            make_scan(out, title, paras, font_path(SERIF, args.font_dir), seed=20260 + i)
        else:
            make_text_pdf(out, title, paras, font_path(SANS, args.font_dir))
        print(f"wrote {out.relative_to(HERE)} ({out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
