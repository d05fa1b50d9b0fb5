"""Retrieval in the user's language: the ``auto`` BM25 analysis (pure functions, property tests)
and a real Milvus Lite collection of Chinese, Japanese, German, French, Spanish, Russian and
English documents searched with the default settings."""

from __future__ import annotations

import json
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import Document, TextNode

from llama_index_rag_pack.citations.annotations import split_sentences
from llama_index_rag_pack.citations.attribution_scores import content_tokens
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.bm25_analysis import (
    LANGUAGES_PROPERTY,
    english_terms,
    resolve_analyzer,
)
from llama_index_rag_pack.documents.language_analysis import LanguageAnalyzer, LanguageProfile
from llama_index_rag_pack.documents.languages import (
    fold_width,
    identify,
    normalize_language,
    query_languages,
    script_runs,
)
from llama_index_rag_pack.documents.sentences import chunk_sentences
from llama_index_rag_pack.documents.stop_words import ENGLISH_STOP_WORDS
from llama_index_rag_pack.documents.words import count_words, join_sentence_parts, lexical_words
from llama_index_rag_pack.milvus.bm25.bm25_fields import (
    BM25_TEXT_FIELD,
    LANGUAGE_KEY,
    stored_bm25_analysis,
)
from llama_index_rag_pack.milvus.bm25.bm25_upgrade import upgrade_bm25_analysis
from llama_index_rag_pack.pack.rag_pack import RagPack

AUTO = LanguageAnalyzer.auto()

# ------------------------------------------------------------------ English stays English
english_words = st.lists(
    st.one_of(
        st.sampled_from(sorted(ENGLISH_STOP_WORDS)),
        st.sampled_from(["running", "runners", "Milvus", "indexes", "BM25", "isn't", "O'Brien"]),
        st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=12),
    ),
    max_size=40,
)
separators = st.sampled_from([" ", ", ", ". ", "\n", "-", "'", "_", "/", "(", ") ", "; "])


@st.composite
def english_texts(draw: st.DrawFn) -> str:
    return "".join(w + draw(separators) for w in draw(english_words))


@pytest.mark.slow
@given(english_texts())
@settings(max_examples=200, deadline=None)
def test_auto_gives_the_english_terms_for_text_without_other_scripts(text):
    # identified or not, ASCII words take English unless another Snowball language is sure
    found = AUTO.analyse_document(text, hint="en")
    if found.language == "en":
        assert found.terms == english_terms(text)


def test_auto_gives_the_english_terms_for_real_english_prose():
    prose = (
        "The aardvark is a medium-sized, burrowing, nocturnal mammal native to Africa. It is "
        "the only living species of the order Tubulidentata, although other prehistoric "
        "species and genera of Tubulidentata are known. Unlike most other insectivores, it has "
        "a long pig-like snout, which is used to sniff out food."
    )
    found = AUTO.analyse_document(prose)
    assert found.language == "en" and found.languages == ("en",)
    assert found.terms == english_terms(prose)
    assert AUTO.query_terms("Which mammals are burrowing?", LanguageProfile({"en": 9})) == (
        english_terms("Which mammals are burrowing?")
    )


# ------------------------------------------------------------------ scripts and words
any_text = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ 019.,!?。！？、")
        + list("土豚吃什么ツチブタはを食べ")
        + list("검색ไทย")
        + ["ー"]
    ),
    max_size=60,
)


@given(any_text)
def test_script_runs_cut_text_without_losing_a_character(text):
    runs = list(script_runs(text))
    assert "".join(run for _, run in runs) == text
    assert all(run for _, run in runs)
    assert all(kind in {"cjk", "bigram", "rest"} for kind, _ in runs)


@given(any_text)
@settings(deadline=None)
def test_analysis_of_any_text_gives_terms_milvus_reads_back_whole(text):
    analysis = resolve_analyzer("auto")
    analysed = analysis.analyse_document(text).text
    assert analysed == " ".join(analysed.split())
    assert all(term.isalnum() and term == term.lower() for term in analysed.split())
    assert analysis.query_text(text) == " ".join(analysis.query_text(text).split())


@given(st.text(max_size=40))
def test_width_folding_is_idempotent(text):
    assert fold_width(fold_width(text)) == fold_width(text)


def test_full_width_letters_read_as_their_ascii_forms():
    assert AUTO("ＭＩＬＶＵＳ　ｖ２") == AUTO("Milvus v2") == ["milvus", "v2"]


def test_chinese_is_segmented_into_words_without_stop_words():
    assert AUTO("土豚晚上吃什么昆虫？") == ["土豚", "晚上", "吃", "昆虫"]
    # the English analysis kept the whole run as one term: nothing ever matched it
    assert english_terms("土豚晚上吃什么昆虫？") == ["土豚晚上吃什么昆虫"]


def test_japanese_words_are_normalised_and_particles_dropped():
    assert AUTO("ツチブタはシロアリを食べます") == ["土豚", "白蟻", "食べる"]
    assert AUTO.analyse_document("ツチブタはシロアリを食べます。").language == "ja"


def test_latin_words_inside_chinese_go_through_the_english_path():
    found = AUTO.analyse_document("在向量数据库 Milvus 里面，indexes 的 running 状态很重要")
    assert found.language == "zh" and set(found.languages) == {"zh", "en"}
    assert {"milvus", "index", "run"} <= set(found.terms)


@pytest.mark.parametrize(
    ("text", "language", "stems"),
    [
        ("Die Erdferkel graben tiefe Höhlen und verschlafen den Tag.", "de", {"erdferkel", "hohl"}),
        ("Les oryctéropes creusent des terriers profonds la nuit venue.", "fr", {"terri"}),
        ("Los cerdos hormigueros duermen durante el día en madrigueras.", "es", {"duerm", "cerd"}),
        ("Трубкозубы питаются муравьями и термитами, которых находят ночью.", "ru", {"пита"}),
    ],
)
def test_snowball_languages_get_their_stemmer_and_stop_words(text, language, stems):
    found = AUTO.analyse_document(text)
    assert found.language == language
    assert stems <= set(found.terms)
    from llama_index_rag_pack.documents.stop_words import stop_words

    assert not set(found.terms) & {w for w in stop_words(language) if len(w) > 3}


def test_scripts_without_a_segmenter_are_read_in_bigrams():
    assert AUTO("검색엔진") == ["검색", "색엔", "엔진"]


def test_a_short_chunk_takes_its_documents_language():
    assert AUTO.analyse_document("Höhlen graben", hint="de").language == "de"
    assert AUTO.analyse_document("Höhlen graben").language == "en"  # too short to tell


def test_languages_from_metadata_are_normalised_or_ignored():
    assert normalize_language("zh-CN") == "zh"
    assert normalize_language("German") == "de"
    assert normalize_language("pt_BR") == "pt"
    assert normalize_language("Klingon") is None
    assert normalize_language(42) is None


# ------------------------------------------------------------------ questions and profiles
def test_a_rare_language_does_not_take_the_main_languages_questions():
    questions = [
        "Which animal digs burrows at night?",
        "running shoes",
        "Kindergarten rules",
        "What is the capital of Germany?",
    ]
    alone = LanguageProfile({"en": 500})
    mixed = LanguageProfile({"en": 500, "de": 3, "fr": 2})
    for q in questions:
        english = english_terms(q)
        assert AUTO.query_terms(q, alone) == english
        terms = AUTO.query_terms(q, mixed)
        # the main language's terms, unchanged; another language's only added (and only the
        # chunks in that language hold them)
        assert terms[: len(english)] == english
        assert not set(terms[len(english) :]) & set(english)
    # a question clearly in the rare language is read in it too
    question = "Wovon ernähren sich die Erdferkel in der Nacht?"
    assert query_languages(question, mixed.counts(), "Latin") == ["en", "de"]
    assert query_languages("running shoes", mixed.counts(), "Latin") == ["en"]
    assert query_languages(question, {"de": 40}, "Latin") == ["de"]
    assert query_languages("Что едят?", mixed.counts(), "Cyrillic") == ["ru"]  # the default


def test_a_kanji_only_question_follows_the_collections_cjk_language():
    assert AUTO.query_terms("土豚", LanguageProfile({"ja": 10})) == ["土豚"]
    assert AUTO.query_terms("夜行性哺乳類", LanguageProfile({"ja": 10})) == ["夜行性", "哺乳類"]
    assert LanguageProfile({"ja": 10, "zh": 3}).main_cjk() == "ja"
    assert LanguageProfile({"zh": 10}).main_cjk() == "zh"


@pytest.mark.slow
@given(st.dictionaries(st.sampled_from(["en", "zh", "ja", "de", "x"]), st.integers(1, 10**6)))
def test_a_profile_survives_its_json_form(counts):
    assert LanguageProfile.from_json(LanguageProfile(counts).to_json()).counts() == counts


@pytest.mark.parametrize("raw", ["", "not json", "[1, 2]", '{"en": "many"}', '{"en": -3}', None])
def test_a_damaged_profile_reads_as_empty(raw):
    assert LanguageProfile.from_json(raw).counts() == {}


def test_identification_is_restricted_to_the_languages_asked():
    assert identify("Das ist gut", candidates=["de", "en"]).language == "de"
    assert identify("running shoes", candidates=["en", "de"]).language == "en"


def test_unknown_analyzers_name_the_choices():
    with pytest.raises(ConfigurationError, match="chinese"):
        resolve_analyzer("klingon")
    assert resolve_analyzer("German").name == "german"
    assert resolve_analyzer("chinese").document_text("Milvus 检索") == "milvus 检索"


# ------------------------------------------------------------------ sentences in every script
def test_chinese_and_japanese_sentences_end_at_their_full_stops():
    zh = "RAPTOR 是一种新的检索方法。它先对文本块聚类！然后怎么办？最后形成一棵树。"
    assert chunk_sentences(zh) == [
        "RAPTOR 是一种新的检索方法。",
        "它先对文本块聚类！",
        "然后怎么办？最后形成一棵树。",  # three words: joined to the next
    ]
    assert "".join(split_sentences(zh)) == zh
    assert split_sentences("はい。いいえ！") == ["はい。", "いいえ！"]


@pytest.mark.slow
@given(english_texts())
def test_word_counts_of_english_are_whitespace_pieces(text):
    assert count_words(text) == len(text.split())


def test_word_counts_and_overlap_use_segmented_words():
    assert count_words("它先对文本块聚类！") == 7
    assert lexical_words("Milvus 支持混合检索") == ["milvus", "支持", "混合", "检索"]
    assert content_tokens("猎豹跑得很快，猎豹很快") == ["猎豹", "跑", "得", "很快"]


# ------------------------------------------------------------------ one collection, seven languages
DOCS = {
    "zh-aardvark": (
        "土豚",
        "土豚是一种生活在非洲草原上的夜行性哺乳动物。它们白天躲在洞穴里睡觉，晚上出来用长长的"
        "舌头舔食蚂蚁和白蚁，也吃其他昆虫。",
    ),
    "zh-river": (
        "长江",
        "长江是中国最长的河流，全长约六千三百公里，流经十一个省级行政区，最后注入东海。",
    ),
    "ja-aardvark": (
        "ツチブタ",
        "ツチブタはアフリカのサバンナに住む夜行性の哺乳類で、主にアリやシロアリを食べます。"
        "昼間は巣穴の中で眠っています。",
    ),
    "ja-mountain": (
        "富士山",
        "富士山は日本で一番高い山で、標高は三千七百七十六メートルです。夏には多くの人が登ります。",
    ),
    "de-aardvark": (
        "Erdferkel",
        "Erdferkel graben mit ihren kräftigen Krallen tiefe Höhlen, in denen sie den Tag "
        "verschlafen.",
    ),
    "de-bridge": (
        "Brücke",
        "Die alte Steinbrücke über den Fluss wurde im vierzehnten Jahrhundert gebaut.",
    ),
    "fr-aardvark": (
        "Oryctérope",
        "Les oryctéropes creusent des terriers profonds avec leurs griffes puissantes et "
        "sortent la nuit.",
    ),
    "fr-wine": (
        "Vin",
        "Les vignerons de Bourgogne récoltent le raisin à la main avant de le presser.",
    ),
    "es-aardvark": (
        "Cerdo hormiguero",
        "Los cerdos hormigueros duermen durante el día en madrigueras subterráneas y cazan "
        "de noche.",
    ),
    "es-coffee": (
        "Café",
        "Los agricultores colombianos cultivan café en las laderas de las montañas.",
    ),
    "ru-aardvark": (
        "Трубкозуб",
        "Трубкозубы питаются муравьями и термитами, которых они находят ночью по запаху.",
    ),
    "ru-lake": (
        "Байкал",
        "Байкал является самым глубоким озером на планете, его глубина больше километра.",
    ),
    "en-aardvark": (
        "Aardvark",
        "Aardvarks are solitary animals that forage at night, digging into termite mounds.",
    ),
    "en-volcano": (
        "Volcano",
        "A volcano erupts when pressure from molten rock forces magma upwards.",
    ),
}
# each shares with its document only segmented words or word stems, never a whole surface run
QUESTIONS = {
    "zh-aardvark": "土豚晚上吃哪些昆虫？",
    "ja-aardvark": "ツチブタは何を食べますか？",
    "de-aardvark": "Womit gräbt das Erdferkel seine Höhle?",
    "fr-aardvark": "Comment l'oryctérope creuse-t-il son terrier ?",
    "es-aardvark": "¿Dónde duerme el cerdo hormiguero?",
    "ru-aardvark": "Чем питается трубкозуб?",
    "en-aardvark": "Which solitary animal forages for termites?",
}


def documents() -> list[Document]:
    return [
        Document(id_=key, text=text, metadata={"title": title})
        for key, (title, text) in DOCS.items()
    ]


def top_doc(pack: RagPack, query: str, mode: str) -> str | None:
    nodes = pack.retriever(mode, similarity_top_k=3).retrieve(query)
    return nodes[0].node.ref_doc_id if nodes else None


@pytest.fixture(scope="module")
def world(tmp_path_factory, embed_model):
    uri = str(tmp_path_factory.mktemp("languages") / "world.db")
    pack = RagPack(documents(), uri=uri, collection_name="world", embed_model=embed_model)
    return uri, pack


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("mode", ["bm25", "hybrid_convex"])
@pytest.mark.parametrize("doc_id", sorted(QUESTIONS))
def test_each_language_finds_its_document_with_the_defaults(world, doc_id, mode):
    _, pack = world
    assert top_doc(pack, QUESTIONS[doc_id], mode) == doc_id


@pytest.mark.slow
@pytest.mark.integration
def test_the_collection_records_its_analysis_and_each_chunks_language(world):
    uri, pack = world
    client = pack.vector_store.client
    assert stored_bm25_analysis(client, "world") == "auto"
    props = client.describe_collection("world")["properties"]
    languages = json.loads(props[LANGUAGES_PROPERTY])
    assert {"zh", "ja", "de", "fr", "es", "ru", "en"} <= set(languages)
    rows = client.query("world", filter='doc_id == "ja-aardvark"', output_fields=[LANGUAGE_KEY])
    assert rows[0][LANGUAGE_KEY] == "ja"
    zh = pack.retriever("bm25", filters=f'{LANGUAGE_KEY} == "zh"').retrieve("土豚")
    assert {n.node.ref_doc_id for n in zh} == {"zh-aardvark"}
    node = zh[0].node
    assert LANGUAGE_KEY not in node.get_content(metadata_mode="llm")
    assert LANGUAGE_KEY not in node.get_content(metadata_mode="embed")
    assert pack.describe()["bm25"].startswith("auto v1 (chunks per language:")


@pytest.mark.slow
@pytest.mark.integration
def test_a_reopened_collection_questions_alike(world, embed_model):
    uri, pack = world
    reopened = RagPack.open(uri=uri, collection_name="world", embed_model=embed_model)
    assert reopened.vector_store.bm25_analysis.profile.counts() == (
        pack.vector_store.bm25_analysis.profile.counts()
    )
    for doc_id, question in QUESTIONS.items():
        assert top_doc(reopened, question, "bm25") == doc_id


@pytest.mark.slow
@pytest.mark.integration
def test_an_english_collection_keeps_its_analysis_until_reindexed(tmp_path, embed_model):
    uri = str(tmp_path / "old.db")
    pack = RagPack(
        documents(),
        uri=uri,
        collection_name="old",
        embed_model=embed_model,
        bm25_analyzer="english",
    )
    assert "reindex" in pack.describe()["bm25"]
    assert top_doc(pack, QUESTIONS["zh-aardvark"], "bm25") is None  # nothing, as before
    pack.vector_store.client.close()
    reopened = RagPack.open(uri=uri, collection_name="old", embed_model=embed_model)
    assert reopened.vector_store.bm25_analysis.name == "english"
    reopened.vector_store.client.close()

    assert upgrade_bm25_analysis(uri, "old") == len(DOCS)
    upgraded = RagPack.open(uri=uri, collection_name="old", embed_model=embed_model)
    assert upgraded.vector_store.bm25_analysis.name == "auto"
    for doc_id, question in QUESTIONS.items():
        assert top_doc(upgraded, question, "bm25") == doc_id
    assert upgrade_bm25_analysis(uri, "old") == 0  # already auto, same version


@pytest.mark.slow
@pytest.mark.integration
def test_a_failed_segmenter_loses_nothing(tmp_path, embed_model, monkeypatch):
    import llama_index_rag_pack.documents.language_analysis as analysis_module

    uri = str(tmp_path / "keep.db")
    pack = RagPack(documents()[:4], uri=uri, collection_name="keep", embed_model=embed_model)
    before = pack.count()

    def broken(text: str) -> list[str]:
        raise ConfigurationError("Chinese text needs rjieba for its BM25 analysis")

    monkeypatch.setattr(analysis_module, "chinese_words", broken)
    with pytest.raises(ConfigurationError, match="rjieba"):
        pack.insert([Document(id_="zh-aardvark", text="土豚在夜里吃白蚁。")])
    monkeypatch.undo()
    assert pack.count() == before
    assert top_doc(pack, QUESTIONS["zh-aardvark"], "bm25") == "zh-aardvark"


def test_user_metadata_naming_a_language_is_used_and_kept(tmp_path, embed_model):
    uri = str(tmp_path / "meta.db")
    docs = [
        Document(id_="a", text="Gift kills.", metadata={LANGUAGE_KEY: "German"}),
        Document(id_="b", text="A gift for you.", metadata={LANGUAGE_KEY: "Klingon"}),
    ]
    pack = RagPack(docs, uri=uri, collection_name="meta", embed_model=embed_model)
    rows = {
        r["doc_id"]: r
        for r in pack.vector_store.client.query(
            "meta", filter="", output_fields=["doc_id", LANGUAGE_KEY, BM25_TEXT_FIELD]
        )
    }
    assert rows["a"][BM25_TEXT_FIELD] == "gift kill"  # German stemmer, German stop words
    assert rows["b"][LANGUAGE_KEY] == "Klingon"  # not a language: left as the user wrote it


def test_the_bundled_english_model_warns_once_on_mostly_chinese_text(embed_model, caplog):
    from llama_index_rag_pack.pack.indexing import warn_if_model_cannot_read

    chinese = [TextNode(text=DOCS["zh-aardvark"][1]) for _ in range(6)]
    english = [TextNode(text=DOCS["en-aardvark"][1] + " " + DOCS["en-volcano"][1])] * 6
    message = warn_if_model_cannot_read(chinese, embed_model)
    assert message and "openai:MODEL" in message and "zh 100%" in message
    assert warn_if_model_cannot_read(english, embed_model) is None
    assert warn_if_model_cannot_read(chinese, object()) is None  # another model: no warning


# ------------------------------------------------------------------ fusion per language
@pytest.mark.slow
@pytest.mark.integration
def test_questions_the_english_model_cannot_read_get_the_unread_weights(world, tmp_path):
    _, pack = world
    config = pack.fusion_config
    retriever = pack.retriever("hybrid_convex")
    unread = (config.unread_alpha, config.unread_sentence_weight)
    # six of the seven languages are not English: the model reads neither them nor the collection
    assert not retriever.reads(QUESTIONS["zh-aardvark"])
    assert retriever.weights(QUESTIONS["zh-aardvark"]) == unread
    assert retriever.weights(QUESTIONS["en-aardvark"]) == unread
    # weights given for the call are meant for every question
    given = pack.retriever("hybrid_convex", alpha=0.3)
    assert given.weights(QUESTIONS["zh-aardvark"]) == (0.3, config.sentence_weight)


def test_an_english_collection_keeps_the_english_weights(embed_model):
    from llama_index_rag_pack.documents.bm25_analysis import Bm25Analysis

    analysis = resolve_analyzer("auto")
    analysis.profile.update({"en": 95, "de": 5})
    assert analysis.read_by({"en"}, "Which animal digs burrows?")
    assert not analysis.read_by({"en"}, "土豚吃什么？")  # the question is not English
    analysis.profile.update({"zh": 60})
    assert not analysis.read_by({"en"}, "Which animal digs burrows?")  # most chunks are not
    assert Bm25Analysis("standard").read_by({"en"}, "土豚吃什么？")  # unknown: read


@pytest.mark.slow
@pytest.mark.integration
def test_eval_fit_on_chinese_questions_fits_the_unread_weights(tmp_path, monkeypatch, capsys):
    from llama_index_rag_pack.cli import main
    from llama_index_rag_pack.fusion.fusion_config import FusionConfig, load_fusion_config

    monkeypatch.setenv("RAG_PACK_DATA_DIR", str(tmp_path / "data"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    chinese = {k: v for k, v in DOCS.items() if k.startswith("zh-")}
    chinese["zh-tea"] = (
        "茶",
        "龙井茶产自杭州西湖一带，采摘后要经过杀青和炒制，才能保持绿茶的清香。",
    )
    chinese["zh-rail"] = ("高铁", "京沪高铁全长一千三百多公里，列车最高时速可以达到三百五十公里。")
    questions = [
        ("土豚白天在哪里睡觉？", "zh-aardvark", "洞穴"),
        ("土豚用什么舔食蚂蚁？", "zh-aardvark", "舌头"),
        ("长江最后流进哪里？", "zh-river", "东海"),
        ("长江大概有多长？", "zh-river", "六千三百公里"),
        ("龙井茶是哪里产的？", "zh-tea", "杭州"),
        ("京沪高铁列车跑多快？", "zh-rail", "三百五十公里"),
    ]
    lines = []
    for key, (title, text) in chinese.items():
        (corpus / f"{key}.txt").write_text(f"{title}\n\n{text}", encoding="utf-8")
    for i, (question, key, answer) in enumerate(questions):
        sentence = next(s for s in split_sentences(chinese[key][1]) if answer in s)
        lines.append(
            json.dumps(
                {
                    "id": f"q{i}",
                    "question": question,
                    "answers": [answer],
                    "relevant_ids": [str((corpus / f"{key}.txt").resolve())],
                    "evidence": [sentence.strip()],
                },
                ensure_ascii=False,
            )
        )
    dataset = tmp_path / "zh_tiny.jsonl"
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--llm", "none", "eval", "--dataset", str(dataset), "--corpus", str(corpus)]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--no-chart"]
    args += ["--fit", "--candidate-pool", "8", "--top-k", "5"]
    assert main(args) == 0
    assert "questions the embedding model cannot read" in capsys.readouterr().out
    config = load_fusion_config(tmp_path / "data" / "fusion.json")
    shipped = FusionConfig()
    assert config.fitted_on["questions_fitted"] == "unread"
    # the weights for questions the model reads stay as they were
    assert (config.alpha, config.sentence_weight) == (shipped.alpha, shipped.sentence_weight)
    scores = config.fitted_on["scores"]
    assert scores[f"convex_{config.normalization}"]["score"] >= scores["dense_alone"]


def _joined_word_by_word(*parts: str) -> str:
    """join_sentence_parts as it reads, one word at a time (no shortcut for text without CJK)."""
    cjk = "\u3000-\u303f\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff01-\uff0f\uff1a-\uff1f"
    char = re.compile(f"[{cjk}]")
    out = ""
    for word in " ".join(parts).split():
        if out and not (char.match(out[-1]) and char.match(word[0])):
            out += " "
        out += word
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from(list("ab .,\n\t\u3000") + list("検索。！方法かナ") + ["é"])
        ),
        min_size=1,
        max_size=4,
    )
)
def test_sentence_parts_join_as_word_by_word(parts: list[str]) -> None:
    assert join_sentence_parts(*parts) == _joined_word_by_word(*parts)


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz äöüéçñßøœ日本語中文한국어русский", max_size=80))
def test_the_default_languages_score_as_the_full_model_restricted_to_them(text) -> None:
    """The identifier cut to the default candidates (the model's other languages not kept)
    gives each of them the log-probability the whole model restricted to them gives."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    from llama_index_rag_pack.documents import languages

    reference = _REFERENCE.get("full")
    if reference is None:
        reference = _REFERENCE["full"] = LanguageIdentifier.from_model_file(MODEL_FILE)
        reference.set_languages(list(languages.DEFAULT_CANDIDATES))
    expected = dict(zip(reference.nb_classes, reference._decide(text).tolist(), strict=True))
    got = languages._scores(text, languages.DEFAULT_CANDIDATES)
    assert got.keys() == expected.keys()
    assert all(abs(got[c] - expected[c]) <= 1e-9 * max(1.0, abs(expected[c])) for c in got)


_REFERENCE: dict[str, object] = {}
