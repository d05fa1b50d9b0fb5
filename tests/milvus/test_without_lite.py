"""An install without Milvus Lite (Windows has no build of it): the dependency's marker, and a
local ``*.db`` path refused in one line that names the server option, before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from llama_index.core import Document
from packaging.requirements import Requirement

from llama_index_rag_pack.cli import checks, main
from llama_index_rag_pack.core import lite_install
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus import client_open
from llama_index_rag_pack.pack.rag_pack import RagPack

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {Requirement(r).name: Requirement(r) for r in project["dependencies"]}


@pytest.mark.parametrize(
    ("platform", "wanted"), [("win32", False), ("linux", True), ("darwin", True)]
)
def test_milvus_lite_is_a_dependency_everywhere_but_windows(platform: str, wanted: bool) -> None:
    requirement = _requirements()["milvus-lite"]
    assert requirement.marker is not None
    assert requirement.marker.evaluate({"sys_platform": platform}) is wanted


@pytest.fixture()
def no_lite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lite_install, "lite_installed", lambda: False)


MESSAGE = "is a Milvus Lite database, but Milvus Lite is not installed"


def test_a_local_path_without_lite_is_one_line_naming_the_server_uri(
    no_lite: None, tmp_path: Path
) -> None:
    uri = str(tmp_path / "milvus.db")
    for check in (client_open.check_uri, checks.check_uri):
        with pytest.raises(ConfigurationError) as caught:
            check(uri)
        text = str(caught.value)
        assert MESSAGE in text and "http://127.0.0.1:19530" in text and "\n" not in text
    with pytest.raises(ConfigurationError, match=MESSAGE):
        RagPack([Document(text="Milvus is a vector database.")], uri=uri, llm="none")
    assert list(tmp_path.iterdir()) == [], "nothing created"


def test_the_cli_says_it_in_one_line_before_loading_anything(
    no_lite: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "milvus.db")
    code = main(["--uri", uri, "ask", "What is Milvus?"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("error: ") and MESSAGE in err and err.count("\n") == 1
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_server_uri_needs_no_milvus_lite(no_lite: None, monkeypatch) -> None:
    monkeypatch.setattr(checks, "server_address", lambda uri: None)  # no connection attempt
    checks.check_uri("unix:/tmp/milvus.sock")  # nothing raised


def test_lite_installed_here() -> None:
    assert lite_install.lite_installed(), "the test machine has Milvus Lite (Linux)"
