"""``index_files(..., sync=True)`` / ``rag-pack index DIR --sync``: files that are gone leave
the collection (chunks, sentences, BM25 statistics, RAPTOR leaves), and the report says what
was added, changed, removed and left unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from llama_index_rag_pack.milvus.document_rows import StoredDocument, gone_documents
from llama_index_rag_pack.pack.file_indexing import index_files


def _write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def _corpus(folder: Path) -> None:
    _write(folder, "rivers.txt", "The Danube flows through ten countries to the Black Sea.")
    _write(folder, "deserts.txt", "The Atacama desert is the driest place on Earth.")
    _write(folder / "sub", "forests.txt", "The Taiga is the largest forest biome on the planet.")
    _write(folder, "glaciers.md", "# Glaciers\n\nThe Vatnajokull glacier covers Iceland's south.")


def _doc_ids(pack) -> set[str]:
    store = pack.vector_store
    rows = store.client.query(store.collection_name, filter="", output_fields=["doc_id"], limit=999)
    return {Path(r["doc_id"]).name for r in rows}


def _bm25_texts(pack, query: str) -> list[str]:
    return [n.node.get_content() for n in pack.retriever(mode="bm25").retrieve(query)]


@pytest.mark.slow
def test_a_sync_removes_deleted_files_everywhere_and_reports_each_kind(
    tmp_path, embed_model, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = Path("docs")
    _corpus(folder)
    kwargs = {"uri": "sync.db", "collection_name": "docs", "embed_model": embed_model}
    first = index_files(folder, sync=True, **kwargs)
    assert (first.new, first.changed, first.removed, first.unchanged) == (4, 0, 0, 0)
    assert "4 new, 0 changed" in first.summary() and "0 removed (0 files gone)" in first.summary()
    sentences_before = first.pack.sentence_index.count()
    assert any("Atacama" in t for t in _bm25_texts(first.pack, "Atacama driest"))

    (folder / "deserts.txt").unlink()
    _write(folder, "rivers.txt", "The Danube flows into the Black Sea through its delta.")
    _write(folder, "volcanoes.txt", "Mount Etna is the most active volcano in Europe.")
    synced = index_files(folder, sync=True, **kwargs)
    assert (synced.new, synced.changed, synced.unchanged, synced.removed) == (1, 1, 2, 1)
    assert synced.removed_files == [str(Path("docs") / "deserts.txt")]
    assert synced.summary().endswith(
        "2 indexed as 2 chunks (1 new, 1 changed), 2 unchanged, 1 removed (1 file gone)"
    )
    pack = synced.pack
    assert _doc_ids(pack) == {"rivers.txt", "forests.txt", "glaciers.md", "volcanoes.txt"}
    # every retriever: dense, BM25 (statistics without the deleted document) and sentences
    for mode in ("vector", "bm25", "hybrid_convex"):
        texts = [n.node.get_content() for n in pack.retriever(mode=mode).retrieve("Atacama")]
        assert not any("Atacama" in t for t in texts), mode
    sentences = pack.sentence_index
    rows = sentences.client.query(
        sentences.collection_name, filter="", output_fields=["doc_id"], limit=999
    )
    assert rows and not any("deserts" in r["doc_id"] for r in rows), "its sentences went too"
    assert len(rows) == sentences.count() <= sentences_before
    stats = pack.vector_store.client.query(
        pack.vector_store.collection_name, filter="", output_fields=["doc_id"], limit=999
    )
    assert all("deserts" not in r["doc_id"] for r in stats)

    # nothing changed: a second sync removes nothing and embeds nothing
    again = index_files(folder, sync=True, **kwargs)
    assert (again.indexed, again.unchanged, again.removed) == (0, 4, 0)


@pytest.mark.slow
def test_without_sync_a_deleted_file_stays(tmp_path, embed_model, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = Path("docs")
    _corpus(folder)
    kwargs = {"uri": "plain.db", "collection_name": "docs", "embed_model": embed_model}
    index_files(folder, **kwargs)
    (folder / "deserts.txt").unlink()
    report = index_files(folder, **kwargs)
    assert "deserts.txt" in _doc_ids(report.pack) and report.removed == 0
    assert "removed" not in report.summary()


@pytest.mark.slow
def test_a_folder_emptied_of_files_syncs_to_nothing_and_other_folders_are_kept(
    tmp_path, embed_model, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _corpus(Path("docs"))
    _write(Path("other"), "moon.txt", "The Moon is Earth's only natural satellite.")
    kwargs = {"uri": "empty.db", "collection_name": "docs", "embed_model": embed_model}
    index_files(["docs", "other"], **kwargs)
    for path in Path("docs").rglob("*.*"):
        path.unlink()
    report = index_files("docs", sync=True, **kwargs)
    assert report.files == 0 and report.removed == 4
    assert _doc_ids(report.pack) == {"moon.txt"}, "a sync of docs/ never touches other/"


@pytest.mark.slow
def test_a_sync_without_recursion_keeps_files_in_sub_folders(
    tmp_path, embed_model, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _corpus(Path("docs"))
    kwargs = {"uri": "flat.db", "collection_name": "docs", "embed_model": embed_model}
    index_files("docs", **kwargs)
    report = index_files("docs", sync=True, recursive=False, **kwargs)
    assert report.removed == 0 and "forests.txt" in _doc_ids(report.pack)


@pytest.mark.slow
def test_an_unreadable_file_keeps_what_was_stored_for_it(
    tmp_path, embed_model, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _corpus(Path("docs"))
    kwargs = {"uri": "keep.db", "collection_name": "docs", "embed_model": embed_model}
    index_files("docs", **kwargs)
    Path("docs/deserts.txt").write_bytes(b"\x00\x01\x02binary\xff\xfe" * 50)
    report = index_files("docs", sync=True, **kwargs)
    assert report.removed == 0 and len(report.skipped) == 1
    assert "deserts.txt" in _doc_ids(report.pack)


@pytest.mark.parametrize("recursive", [True, False])
def test_gone_documents_picks_files_under_the_roots_only(tmp_path, recursive: bool) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    kept = root / "a.txt"
    kept.write_text("a")
    stored = [
        StoredDocument("a", None, str(kept)),
        StoredDocument("gone", None, str(root / "gone.txt")),
        StoredDocument("deep", None, str(root / "sub" / "deep.txt")),
        StoredDocument("elsewhere", None, str(tmp_path / "other" / "x.txt")),
        StoredDocument("api", None, None),
        StoredDocument("pdf_part_3", None, str(root / "b.pdf")),
        StoredDocument("pdf_part_0", None, str(root / "b.pdf")),
    ]
    (root / "b.pdf").write_text("pdf")
    read = {kept.resolve(): {"a"}, (root / "b.pdf").resolve(): {"pdf_part_0"}}
    gone = gone_documents(stored, [root], [kept, root / "b.pdf"], read, recursive=recursive)
    expected = {"gone", "pdf_part_3"} | ({"deep"} if recursive else set())
    assert {d.doc_id for d in gone.documents} == expected


@pytest.mark.slow
def test_a_sync_takes_the_leaves_of_a_gone_file_out_of_the_raptor_tree_without_the_llm(
    tmp_path, embed_model, monkeypatch, capsys
) -> None:
    from llama_index_rag_pack.pack.rag_pack import RagPack
    from llama_index_rag_pack.pack.raptor import open_pack_tree
    from llama_index_rag_pack.raptor.raptor_updates import stale_children
    from llama_index_rag_pack.testing import ScriptedLLM

    monkeypatch.chdir(tmp_path)
    folder = Path("docs")
    for k in range(3):
        _write(folder, f"deserts_{k}.txt", f"The Atacama desert note {k}: the driest place.")
        _write(folder, f"rivers_{k}.txt", f"The Danube river note {k}: it meets the Black Sea.")
    kwargs = {"uri": "tree.db", "collection_name": "docs", "embed_model": embed_model}
    llm = ScriptedLLM(replies=lambda prompt: "In short: notes on deserts and rivers.")
    index_files(folder, **kwargs)
    pack = RagPack.open(llm=llm, **kwargs)
    pack.build_raptor_tree(max_length_in_cluster=60, reduction_dim=4, min_compression=1.0)
    tree = open_pack_tree(pack)
    assert tree.store.top_level() >= 1 and stale_children(tree.store) == set()

    (folder / "deserts_0.txt").unlink()
    calls = llm.call_count
    report = index_files(folder, sync=True, **kwargs)
    assert report.removed == 1 and llm.call_count == calls, "the sync calls no LLM"
    leaves = [n.metadata.get("file_path") for n in tree.store.level(0)]
    assert leaves and not any("deserts_0" in str(p) for p in leaves)
    assert stale_children(tree.store), "the summaries above it are stale until refreshed"
    stats = tree.refresh()  # rag-pack raptor update
    assert stats.llm_calls >= 1 and stale_children(tree.store) == set()

    from llama_index_rag_pack.cli import main

    capsys.readouterr()
    assert main(["--uri", "tree.db", "--collection", "docs", "raptor", "update"]) == 0
    assert "up to date: no summary lost a leaf" in capsys.readouterr().out


@pytest.mark.slow
def test_a_sync_from_another_directory_finds_the_same_files(
    tmp_path, embed_model, monkeypatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.chdir(tmp_path)
    _corpus(home / "docs")
    uri = str(tmp_path / "abs.db")
    kwargs = {"uri": uri, "collection_name": "docs", "embed_model": embed_model}
    monkeypatch.chdir(home)
    index_files("docs", **kwargs)  # stored as relative paths: docs/rivers.txt, ...
    (home / "work" / "docs").mkdir(parents=True)  # the same relative name, elsewhere, empty
    monkeypatch.chdir(home / "work")
    report = index_files("docs", sync=True, **kwargs)
    assert report.removed == 0, "home/docs is not under work/docs: nothing deleted"
    assert len(_doc_ids(report.pack)) == 4


@pytest.mark.slow
def test_documents_of_types_the_sync_does_not_read_are_kept(
    tmp_path, embed_model, monkeypatch
) -> None:
    from llama_index.core import Document

    from llama_index_rag_pack.pack.rag_pack import RagPack

    monkeypatch.chdir(tmp_path)
    _corpus(Path("docs"))
    kwargs = {"uri": "types.db", "collection_name": "docs", "embed_model": embed_model}
    report = index_files("docs", **kwargs)
    notebook = Document(
        text="A notebook about rivers.", metadata={"file_path": "docs/analysis.ipynb"}
    )
    RagPack.open(llm="none", **kwargs).insert([notebook])
    synced = index_files("docs", sync=True, **kwargs)
    assert synced.removed == 0
    store = report.pack.vector_store
    rows = store.client.query(
        store.collection_name, filter="", output_fields=["file_path"], limit=99
    )
    assert "docs/analysis.ipynb" in {r.get("file_path") for r in rows}


@pytest.mark.slow
def test_a_file_whose_name_is_not_utf8_is_not_taken_for_gone(tmp_path, embed_model) -> None:
    import os

    folder = tmp_path / "docs"
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 file name on a UTF-8 system
    try:
        (folder / name).write_text("The cafe serves coffee all day.", encoding="utf-8")
    except (OSError, UnicodeError):
        pytest.skip("the file system refuses undecodable names")
    kwargs = {"uri": str(tmp_path / "u.db"), "collection_name": "docs", "embed_model": embed_model}
    index_files(folder, **kwargs)
    report = index_files(folder, sync=True, **kwargs)
    assert report.removed == 0 and report.unchanged == 1
