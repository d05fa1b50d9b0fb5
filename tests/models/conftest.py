"""Fixtures of the model tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llama_index_rag_pack.models import onnx_encoder


@pytest.fixture()
def exported_copy(embed_model, tmp_path) -> Path:
    """An onnx_dir holding a copy of the default export (made by the session's model)."""
    embed_model.get_query_embedding("warm up")
    source = onnx_encoder.onnx_export_path(embed_model.model_name)
    target = onnx_encoder.onnx_export_path(embed_model.model_name, tmp_path)
    target.parent.mkdir(parents=True)
    try:  # a link, not a 90 MB copy per test
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)
    return tmp_path
