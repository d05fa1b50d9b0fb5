"""The shipped hand-written set ``wiki_qa_para``: every rule it was written to is checked here.

The rules (``benchmarks/data/README.md``): questions paraphrase their evidence (no run of more
than three words copied from it), the answer appears in the evidence, the evidence is copied
verbatim from the article, most answers sit past the article's first fifth, some questions need
two sentences, and the dev/test split is the seeded 50/50 split per (corpus, hops) stratum.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.labelled import load_corpus, load_labelled_set, shipped_sets
from llama_index_rag_pack.evaluation.metrics import answer_in_text

MAX_COPIED_RUN = 3
MIN_QUESTIONS = {"wikipedia": 120, "lee": 30}
MIN_TWO_HOP_SHARE = 0.15
LEAD_FRACTION = 0.2
MAKE_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "make_wiki_qa_para.py"


def words(text: str) -> list[str]:
    """Lower-cased words with the punctuation stripped (``Baron-Cohen's`` -> baron, cohen, s)."""
    return re.findall(r"[a-z0-9]+", text.lower())


def longest_copied_run(question: str, evidence: str) -> int:
    """Length of the longest run of consecutive words the question shares with the evidence."""
    q, e = words(question), words(evidence)
    best = 0
    previous = [0] * (len(e) + 1)
    for i in range(1, len(q) + 1):
        current = [0] * (len(e) + 1)
        for j in range(1, len(e) + 1):
            if q[i - 1] == e[j - 1]:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def source(record: dict[str, Any]) -> str:
    return "wikipedia" if record["relevant_ids"][0].startswith("wiki:") else "lee"


def squash(text: str) -> str:
    return " ".join(text.split()).lower()


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    path = shipped_sets()["wiki_qa_para"]
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return {doc.doc_id: doc.text for doc in load_corpus("wikipedia+lee")}


def test_copy_check_counts_runs_of_words() -> None:
    evidence = "In 1929, the first Academy Awards were presented at a banquet dinner."
    assert longest_copied_run("Where were the first Academy Awards held?", evidence) == 4
    assert longest_copied_run("Where was the first Oscars dinner held?", evidence) == 2
    assert longest_copied_run("WHERE -- were, the FIRST academy AWARDS?", evidence) == 4
    assert longest_copied_run("", evidence) == 0


@pytest.mark.slow
def test_the_set_loads_with_both_corpora(
    records: list[dict[str, Any]], texts: dict[str, str]
) -> None:
    data = load_labelled_set("wiki_qa_para")
    assert data.corpus == "wikipedia+lee"
    # the combined corpus: the Wikipedia articles, then the Lee news articles
    prefixes = [doc_id.split(":", 1)[0] for doc_id in texts]
    assert prefixes == sorted(prefixes, key=["wiki", "lee"].index)
    assert Counter(prefixes) == {"wiki": 103, "lee": 300}
    assert data.relevant_document_ids() <= set(texts)
    assert len(data) == len(records)
    per_corpus = Counter(source(r) for r in records)
    for corpus, minimum in MIN_QUESTIONS.items():
        assert per_corpus[corpus] >= minimum, per_corpus
    for ex in data:
        assert len(ex.relevant_ids) == 1 and ex.answers and ex.evidence and ex.type


@pytest.mark.slow
def test_questions_are_paraphrased(records: list[dict[str, Any]]) -> None:
    copied = [
        (r["id"], run)
        for r in records
        for sentence in r["evidence"]
        if (run := longest_copied_run(r["question"], sentence)) > MAX_COPIED_RUN
    ]
    assert not copied, f"questions repeating more than {MAX_COPIED_RUN} words: {copied}"


@pytest.mark.slow
def test_answers_appear_in_the_evidence(records: list[dict[str, Any]]) -> None:
    for r in records:
        evidence = " ".join(r["evidence"])
        for answer in r["answers"]:
            assert squash(answer) in squash(evidence), (r["id"], answer)
            # the scorer's answer-in-context test (whole normalised tokens) finds it too
            assert answer_in_text(evidence, [answer]), (r["id"], answer)


@pytest.mark.slow
def test_evidence_is_copied_from_the_article(
    records: list[dict[str, Any]], texts: dict[str, str]
) -> None:
    for r in records:
        text = texts[r["relevant_ids"][0]]
        assert len(r["evidence_offsets"]) == len(r["evidence"])
        for sentence, offset in zip(r["evidence"], r["evidence_offsets"], strict=True):
            assert text[offset : offset + len(sentence)] == sentence, r["id"]
        assert r["evidence_position"] == round(min(r["evidence_offsets"]) / len(text), 3)


@pytest.mark.slow
def test_most_answers_sit_past_the_lead(records: list[dict[str, Any]]) -> None:
    past_lead = sum(r["evidence_position"] > LEAD_FRACTION for r in records)
    assert past_lead >= len(records) / 2


@pytest.mark.slow
def test_some_questions_need_two_sentences(records: list[dict[str, Any]]) -> None:
    for r in records:
        assert r["hops"] == len(r["evidence"]) in (1, 2), r["id"]
        assert len(set(r["evidence"])) == len(r["evidence"]), r["id"]
    two_hop = sum(r["hops"] == 2 for r in records)
    assert two_hop >= MIN_TWO_HOP_SHARE * len(records)
    assert {source(r) for r in records if r["hops"] == 2} == {"wikipedia", "lee"}


@pytest.mark.slow
def test_split_is_half_of_every_stratum(records: list[dict[str, Any]]) -> None:
    strata = Counter((source(r), r["hops"], r["split"]) for r in records)
    for corpus, hops in {(source(r), r["hops"]) for r in records}:
        assert abs(strata[(corpus, hops, "dev")] - strata[(corpus, hops, "test")]) <= 1
    dev = load_labelled_set("wiki_qa_para", split="dev")
    test = load_labelled_set("wiki_qa_para", split="test")
    assert (dev.name, test.name) == ("wiki_qa_para-dev", "wiki_qa_para-test")
    assert dev.corpus == test.corpus == "wikipedia+lee"
    dev_ids, test_ids = {ex.id for ex in dev}, {ex.id for ex in test}
    assert not dev_ids & test_ids
    assert dev_ids | test_ids == {r["id"] for r in records}
    with pytest.raises(ConfigurationError, match=r"its splits are one of: dev, test"):
        load_labelled_set("wiki_qa_para", split="train")


@pytest.mark.slow
@pytest.mark.skipif(not MAKE_SCRIPT.exists(), reason="needs a source checkout (benchmarks/)")
def test_split_and_offsets_are_what_the_script_derives(
    records: list[dict[str, Any]], texts: dict[str, str]
) -> None:
    spec = importlib.util.spec_from_file_location("make_wiki_qa_para", MAKE_SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    derived = copy.deepcopy(records)
    for r in derived:
        del r["split"], r["evidence_offsets"], r["evidence_position"]
        script.add_offsets(r, texts)
    script.assign_splits(derived)
    assert derived == records
