"""The docs site's structure, checked without mkdocs (``mkdocs build --strict`` runs in .ci/run).

Every page under docs/ is in the site's nav and every nav entry is a page; the API reference
(docs/api/*.md, rendered by mkdocstrings) has one ``::: llama_index_rag_pack.NAME`` entry for each
name in ``llama_index_rag_pack.__all__`` and none for a name that is not public; the set-up
commands quoted on the site are the README's, which CI runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import llama_index_rag_pack

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API_ENTRY = re.compile(r"^::: llama_index_rag_pack\.(\w+)\s*$", re.M)


def _config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _nav_pages(entries: Any) -> Iterator[str]:
    """The page paths of a mkdocs nav: strings, ``{title: page}`` and ``{title: [...]}``."""
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from _nav_pages(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from _nav_pages(value)


def _pages() -> set[str]:
    excluded = ("_ext/",)  # mkdocs.yml's exclude_docs: code, not pages
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    return {p for p in pages if not p.startswith(excluded)}


def _api_entries() -> list[str]:
    return [
        name
        for page in sorted((DOCS / "api").glob("*.md"))
        for name in API_ENTRY.findall(page.read_text(encoding="utf-8"))
    ]


def _fenced_after(text: str, marker: str) -> str:
    """The fenced block right after a ``<!-- marker -->`` line (what .ci/run extracts)."""
    match = re.search(rf"^<!-- {marker} -->\n```\w*\n(.*?)^```$", text, re.S | re.M)
    assert match, f"README.md: no block after <!-- {marker} -->"
    return match.group(1)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    nav = list(_nav_pages(_config()["nav"]))
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    assert not _pages() - set(nav), "docs pages missing from mkdocs.yml's nav"
    assert not set(nav) - _pages(), "nav entries without a page under docs/"


def test_every_public_name_has_one_api_reference_entry() -> None:
    entries = _api_entries()
    public = set(llama_index_rag_pack.__all__)
    assert not public - set(entries), "names of __all__ missing from docs/api/*.md"
    assert not set(entries) - public, "docs/api/*.md documents names that are not in __all__"
    duplicates = sorted({n for n in entries if entries.count(n) > 1})
    assert not duplicates, f"documented twice: {duplicates}"


def test_every_api_page_is_in_the_nav() -> None:
    nav = set(_nav_pages(_config()["nav"]))
    api_pages = {p for p in _pages() if p.startswith("api/")}
    assert api_pages and api_pages <= nav


@pytest.mark.parametrize(
    ("page", "markers"),
    [
        ("getting-started.md", ["main-command", "test-command"]),
        ("development.md", ["compat-command"]),
    ],
)
def test_commands_quoted_on_the_site_are_the_readmes(page: str, markers: list[str]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    text = (DOCS / page).read_text(encoding="utf-8")
    for marker in markers:
        command = _fenced_after(readme, marker)
        assert f"```bash\n{command}```" in text, f"docs/{page}: not the README's {marker}"
