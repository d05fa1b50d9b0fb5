"""Fixtures of the model tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llama_index_rag_pack.models import onnx_encoder


def _copy_export(embed_model, root: Path) -> Path:
    """``root`` as an onnx_dir holding a copy of the default export (made by the session's
    model)."""
    embed_model.get_query_embedding("warm up")
    source = onnx_encoder.onnx_export_path(embed_model.model_name)
    target = onnx_encoder.onnx_export_path(embed_model.model_name, root)
    target.parent.mkdir(parents=True)
    try:  # a link, not a 90 MB copy per test
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)
    return root


@pytest.fixture()
def exported_copy(embed_model, tmp_path) -> Path:
    """An onnx_dir holding a copy of the default export (made by the session's model)."""
    return _copy_export(embed_model, tmp_path)


@pytest.fixture(scope="module")
def quantised_copy(embed_model, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An onnx_dir whose int8 copy is made, for the tests that only use it (quantising takes
    seconds); the tests of making it start from a copy of their own (``exported_copy``)."""
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding

    root = _copy_export(embed_model, tmp_path_factory.mktemp("int8"))
    LocalEmbedding(embed_model.model_name, onnx_dir=str(root), precision="int8")._embed(["a"])
    return root
