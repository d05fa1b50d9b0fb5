"""Where core's ``HuggingFaceEmbedding`` finds a Hub model on this machine, looked up without
importing PyTorch and without downloading anything."""

from __future__ import annotations

from pathlib import Path

__all__ = ["cached_model_dir"]


def cached_model_dir(name: str) -> str | None:
    """The snapshot directory of the Hub model ``name`` where core's ``HuggingFaceEmbedding``
    loads it from (LlamaIndex's cache directory), or ``None`` when it is not there.

    Looked up without importing PyTorch. A bare name is also tried under
    ``sentence-transformers/``, as sentence-transformers does. Nothing is downloaded.
    """
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from llama_index.core.utils import get_cache_dir

    candidates = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    for repo_id in candidates:
        try:
            found = try_to_load_from_cache(repo_id, "config.json", cache_dir=get_cache_dir())
        except HFValidationError:  # not a Hub id ("a/b/c", spaces, ...)
            continue
        if isinstance(found, str):
            return str(Path(found).parent)
    return None
