"""The prose in an LLM reply that should hold nothing else: a RAPTOR summary, a HyDE passage.

Small models wrap such replies: a code fence, a chatty lead ("Sure! Here is a summary of the
text:", "Certainly, I can help with that."), a label ("Summary:", "Passage:"), quotes around the
whole. :func:`unwrap_prose` removes those and keeps everything else as written. (Replies that
hold a list, JSON or a choice are read by :mod:`~llama_index_rag_pack.core.llm_output`.)
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import re

from llama_index_rag_pack.core.llm_output import strip_code_fences

__all__ = ["unwrap_prose"]

_OPENING_QUOTES = "\"'`“‘«"
_CLOSING_QUOTES = "\"'`”’»"


@functools.lru_cache(maxsize=16)
def _lead(label: str) -> re.Pattern[str]:
    return re.compile(
        r"^\s*(?:"
        # "Sure!", "Certainly, I can help with that.", "Of course:" (a short first sentence)
        r"(?:sure|certainly|of\s+course)\b[^\n]{0,80}?(?:[!.:](?:\s+|$)|\n)"
        r"|(?:okay|ok)\b[,!.]?\s+"  # "Okay, " (the word only: what follows may be content)
        r"|here(?:'s|\s+is)\b[^\n:]*:"  # "Here is a summary of the text:"
        rf"|{label}\s*:"  # "Summary:"
        r")\s*",
        re.IGNORECASE,
    )


def unwrap_prose(text: str, *, label: str) -> str:
    """``text`` without code fences, a chatty lead, a ``label:`` and wrapping quotes.

    Args:
        text: The raw reply.
        label: A regular expression for the label the model may put first (``summary``).

    Example:
        >>> unwrap_prose('Sure! Here is a summary:\\n\\n"Aardvarks eat ants."', label="summary")
        'Aardvarks eat ants.'
        >>> unwrap_prose("Plain text stays: as it is.", label="summary")
        'Plain text stays: as it is.'
    """
    text = strip_code_fences(text or "")
    lead = _lead(label)
    for _ in range(3):  # "Sure! Here is a passage:\nPassage: ..." takes several passes
        new = lead.sub("", text, count=1).strip()
        if new == text:
            break
        text = new
    if len(text) >= 2 and text[0] in _OPENING_QUOTES and text[-1] in _CLOSING_QUOTES:
        text = text[1:-1].strip()
    return text
