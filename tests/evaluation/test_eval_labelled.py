"""The labelled JSONL format: loading, validation with line numbers, the shipped set."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.labelled import (
    LabelledExample,
    LabelledSet,
    load_corpus,
    load_labelled_set,
    save_labelled_set,
    shipped_sets,
)


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def test_load_round_trip_and_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mine.jsonl",
        [
            {
                "question": "Who?",
                "answers": "Ada",
                "relevant_ids": ["doc:1"],
                "corpus": "docs",
                "difficulty": 2,
            },
            "",
            {
                "id": "x",
                "question": " What? ",
                "relevant_ids": ["doc:2", "doc:3"],
                "corpus": "docs",
            },
        ],
    )
    (tmp_path / "docs").mkdir()
    data = load_labelled_set(path)
    assert data.name == "mine"
    assert [ex.id for ex in data] == ["q1", "x"]  # default id is the line number
    assert data.examples[0].answers == ("Ada",)  # a single string becomes a list
    assert data.examples[0].extra == {"difficulty": 2}  # unknown fields are kept
    assert data.examples[1].question == "What?"
    assert data.corpus == str(tmp_path / "docs")  # relative corpus resolved next to the file
    assert data.relevant_document_ids() == {"doc:1", "doc:2", "doc:3"}
    out = tmp_path / "copy.jsonl"
    save_labelled_set(data.examples, out, corpus="docs")
    again = load_labelled_set(out)
    assert again.examples == data.examples
    assert again.fingerprint() == data.fingerprint()


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"question": "ok"}', "{not json"], r"bad\.jsonl:2: not valid JSON"),
        (['{"question": ""}'], r"bad\.jsonl:1: 'question' must be a non-empty string"),
        (['["a list"]'], r"bad\.jsonl:1: expected a JSON object, got list"),
        (
            ['{"question": "q", "relevant_ids": 5}'],
            r"bad\.jsonl:1: 'relevant_ids' must be a string or a list",
        ),
        (
            ['{"id": "a", "question": "q"}', '{"id": "a", "question": "r"}'],
            r"bad\.jsonl:2: duplicate id 'a'",
        ),
        (
            ['{"question": "q", "corpus": "wikipedia"}', '{"question": "r", "corpus": "lee"}'],
            r"mixes corpora",
        ),
        ([""], r"holds no questions"),
    ],
)
def test_invalid_files_name_the_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ConfigurationError, match=message):
        load_labelled_set(path)


def test_split_keeps_one_part_of_the_set(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mine.jsonl",
        [
            {"id": "a", "question": "q?", "split": "dev", "corpus": "wikipedia+lee"},
            {"id": "b", "question": "r?", "split": "test", "corpus": "wikipedia+lee"},
            {"id": "c", "question": "s?", "split": "dev", "corpus": "wikipedia+lee"},
        ],
    )
    everything = load_labelled_set(path)
    assert everything.name == "mine" and len(everything) == 3
    assert everything.corpus == "wikipedia+lee"  # several shipped corpora, not a path
    dev = load_labelled_set(path, split="dev")
    assert dev.name == "mine-dev"
    assert [ex.id for ex in dev] == ["a", "c"]
    assert dev.fingerprint() != everything.fingerprint()
    with pytest.raises(ConfigurationError, match=r"'train'; its splits are one of: dev, test"):
        load_labelled_set(path, split="train")
    plain = _write(tmp_path / "plain.jsonl", [{"question": "q?"}])
    with pytest.raises(ConfigurationError, match="none: it has no 'split' field"):
        load_labelled_set(plain, split="dev")


def test_unknown_set_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"No labelled set 'nope'.*wiki_qa"):
        load_labelled_set("nope")


def test_subset_is_seeded_and_keeps_file_order() -> None:
    data = LabelledSet("s", [LabelledExample(id=str(i), question=f"q{i}") for i in range(50)])
    a = data.subset(10, seed=3)
    b = data.subset(10, seed=3)
    c = data.subset(10, seed=4)
    assert [e.id for e in a] == [e.id for e in b]
    assert [e.id for e in a] != [e.id for e in c]
    assert [int(e.id) for e in a] == sorted(int(e.id) for e in a)
    assert data.subset(None) is data
    with pytest.raises(ConfigurationError, match="limit must be > 0, got 0"):
        data.subset(0)


def test_load_corpus_errors_say_what_to_pass() -> None:
    with pytest.raises(ConfigurationError, match="pass --corpus wikipedia|lee|PATH"):
        load_corpus(None)
    with pytest.raises(ConfigurationError, match="Unknown corpus 'nowhere'"):
        load_corpus("nowhere")
    with pytest.raises(ConfigurationError, match=r"Unknown corpus 'wikipedia\+nowhere'.*'\+'"):
        load_corpus("wikipedia+nowhere")


def test_shipped_wiki_qa_set_is_valid_and_labelled() -> None:
    assert "wiki_qa" in shipped_sets()
    data = load_labelled_set("wiki_qa")
    assert len(data) >= 100
    assert data.corpus == "wikipedia"
    types = {ex.type for ex in data}
    assert types == {"definition", "year", "entity"}
    for ex in data:
        assert ex.relevant_ids and all(r.startswith("wiki:") for r in ex.relevant_ids)
        assert ex.answers and ex.evidence
        # the answer was removed from the question and comes from the evidence sentence
        assert ex.answers[0] in ex.evidence[0] or ex.type == "definition"
        assert ex.question.endswith("?")


@pytest.fixture(scope="module")
def wiki_texts() -> dict[str, str]:
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

    return {d.doc_id: d.text for d in load_wikipedia_documents()}


@pytest.mark.slow
def test_shipped_articles_are_clean_text(wiki_texts: dict[str, str]) -> None:
    assert len(wiki_texts) >= 100
    for doc_id, text in wiki_texts.items():
        for markup in ("[[", "]]", "{{", "{|", "<ref", "</ref>", "'''", "<!--", "thumb|"):
            assert markup not in text, (doc_id, markup)
    # A stray "<" ("<10 ppm") must not swallow the text up to the next ">": gensim's
    # filter_wiki keeps 7k of the 37k characters of Asphalt that way.
    assert len(wiki_texts["wiki:Asphalt"]) > 30_000


@pytest.mark.slow
def test_wiki_qa_ids_exist_in_the_shipped_corpus(wiki_texts: dict[str, str]) -> None:
    texts = {doc_id: " ".join(text.split()) for doc_id, text in wiki_texts.items()}
    data = load_labelled_set("wiki_qa")
    for ex in data:
        (doc_id,) = ex.relevant_ids
        assert doc_id in texts
        assert " ".join(ex.evidence[0].split()) in texts[doc_id]


def test_hard_variant_drops_words_but_keeps_labels() -> None:
    easy = load_labelled_set("wiki_qa")
    hard = load_labelled_set("wiki_qa_hard")
    assert len(hard) == len(easy)
    for e, h in zip(easy, hard, strict=True):
        assert h.relevant_ids == e.relevant_ids and h.answers == e.answers
        assert len(h.question.split()) < len(e.question.split())


def test_fanoutqa_questions_load_in_the_labelled_format() -> None:
    from llama_index_rag_pack.evaluation.datasets import load_fanoutqa_questions
    from llama_index_rag_pack.evaluation.labelled import parse_example

    records = load_fanoutqa_questions()
    assert len(records) == 310
    first = parse_example(records[0], where="fanoutqa", default_id="x")
    assert first.question.endswith("?") and first.answers and not first.relevant_ids
    # structured answers are flattened into one string
    assert "Pat Burrell: Right" in first.answers[0]
    with pytest.raises(ConfigurationError, match="split must be 'dev' or 'test', got 'train'"):
        load_fanoutqa_questions("train")


@pytest.mark.slow
def test_the_shipped_dump_is_parsed_once_per_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from llama_index_rag_pack.evaluation import datasets

    shutil.copy(datasets.gensim_test_data_dir() / datasets.WIKI_DUMP, tmp_path)
    dump = tmp_path / datasets.WIKI_DUMP
    monkeypatch.setattr(datasets, "gensim_test_data_dir", lambda: tmp_path)
    parses: list[str] = []
    parse = datasets.iter_wikipedia_pages
    monkeypatch.setattr(
        datasets, "iter_wikipedia_pages", lambda p: parses.append(str(p)) or parse(p)
    )
    first = datasets.load_wikipedia_documents(["Aardvark"])
    first[0].metadata["title"] = "changed by the caller"
    again = datasets.load_wikipedia_documents(["Aardvark", "Apollo 11"])
    assert parses == [str(dump)]  # the second call reads nothing
    assert again[0].metadata["title"] == "Aardvark" and again[0] is not first[0]
    assert again[0].text == first[0].text and again[1].metadata["title"] == "Apollo 11"
    os.utime(dump, ns=(1, 1))  # another version of the file: read again
    assert datasets.load_wikipedia_documents(["Aardvark"])[0].text == first[0].text
    assert len(parses) == 2
    with pytest.raises(ConfigurationError, match="Not in the shipped"):
        datasets.load_wikipedia_documents(["No Such Article"])


@pytest.mark.slow
def test_another_dump_is_streamed_and_a_limit_stops_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index_rag_pack.evaluation import datasets

    read: list[str] = []
    pages = datasets.iter_wikipedia_pages

    def counted(path: Any) -> Any:
        for page in pages(path):
            read.append(page[0])
            yield page

    monkeypatch.setattr(datasets, "iter_wikipedia_pages", counted)
    dump = datasets.gensim_test_data_dir() / datasets.WIKI_DUMP
    two = datasets.load_wikipedia_documents(limit=2, path=dump)
    assert len(two) == 2 and read[-1] == two[-1].metadata["title"]  # nothing read past it
    everything = len(read)
    assert len(datasets.load_wikipedia_documents(limit=2, path=dump)) == 2
    assert len(read) == 2 * everything  # read again: another dump is never kept


def test_shipped_zh_qa_set_is_labelled_against_its_corpus() -> None:
    from collections import Counter

    from llama_index_rag_pack.evaluation.labelled import load_corpus

    dataset = load_labelled_set("zh_qa")
    assert dataset.corpus == "zh_tutorials"
    documents = {d.doc_id: d.text for d in load_corpus("zh_tutorials")}
    assert len(documents) == 5
    splits = Counter(ex.extra.get("split") for ex in dataset.examples)
    assert splits == {"dev": 60, "test": 90}
    assert {ex.extra.get("lang") for ex in dataset.examples} == {"zh", "zh-code", "en"}
    seen: set[str] = set()
    for ex in dataset.examples:
        (doc_id,) = ex.relevant_ids
        for sentence in ex.evidence:
            assert documents[doc_id].count(sentence) == 1, (ex.id, sentence)
            assert sentence not in seen
            seen.add(sentence)
        assert all(any(a in e for e in ex.evidence) for a in ex.answers), ex.id
    assert len(load_labelled_set("zh_qa", split="test").examples) == 90
