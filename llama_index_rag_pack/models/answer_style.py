"""Which answer style an LLM gets: ``extractive`` for a model too small to be believed,
``generative`` for the rest.

An extractive answer is built from the retrieved passages' own sentences
(:mod:`~llama_index_rag_pack.citations.extractive_answers`); a generative one is written by the
LLM. ``auto`` (the default everywhere) picks extractive for a local GGUF model with fewer than
:data:`SMALL_MODEL_PARAMETERS` weights, read from the file's tensor table (the bundled
SmolLM2-135M has 134,515,008), and generative for any other LLM: an OpenAI-compatible model, a
larger GGUF file, any LLM object you pass. Name the style to choose it yourself.

Example:
    >>> resolve_answer_style("generative", None)
    'generative'
    >>> from llama_index_rag_pack.testing import ScriptedLLM
    >>> resolve_answer_style("auto", ScriptedLLM(replies=["..."]))
    'generative'
"""

# Pure module: no LlamaIndex, no pymilvus

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "ANSWER_STYLES",
    "SMALL_MODEL_PARAMETERS",
    "check_answer_style",
    "describe_answer_style",
    "model_parameters",
    "resolve_answer_style",
]

#: The answer styles: ``auto`` resolves to one of the other two.
ANSWER_STYLES = ("auto", "extractive", "generative")
#: A local GGUF model with fewer weights than this answers extractively under ``auto``.
SMALL_MODEL_PARAMETERS = 1_000_000_000


def check_answer_style(style: Any) -> str:
    """``style`` when it is one of :data:`ANSWER_STYLES`.

    Raises:
        ConfigurationError: Any other value.
    """
    if style not in ANSWER_STYLES:
        raise ConfigurationError(
            f"unknown answer_style {style!r}; choose one of {', '.join(ANSWER_STYLES)}"
        )
    return str(style)


def model_parameters(llm: Any) -> int | None:
    """How many weights a local GGUF ``llm`` has (``None`` for any other LLM, or a GGUF file
    whose tensor table cannot be read)."""
    info = getattr(llm, "gguf_info", None)
    parameters = getattr(info, "parameters", None)
    return parameters if isinstance(parameters, int) and parameters > 0 else None


def resolve_answer_style(style: str, llm: Any) -> str:
    """``extractive`` or ``generative``: ``style`` itself when named, else (``auto``)
    extractive for a local GGUF ``llm`` below :data:`SMALL_MODEL_PARAMETERS` weights.

    Raises:
        ConfigurationError: ``style`` is not one of :data:`ANSWER_STYLES`.
    """
    if check_answer_style(style) != "auto":
        return style
    parameters = model_parameters(llm)
    small = parameters is not None and parameters < SMALL_MODEL_PARAMETERS
    return "extractive" if small else "generative"


def describe_answer_style(style: str, llm: Any) -> str:
    """``style`` resolved for ``llm``, with the reason (for ``describe()`` and the CLI).

    Example:
        >>> describe_answer_style("extractive", None)
        'extractive (chosen)'
    """
    resolved = resolve_answer_style(style, llm)
    if style != "auto":
        return f"{resolved} (chosen)"
    parameters = model_parameters(llm)
    if parameters is None:
        return f"{resolved} (auto: not a local GGUF model)"
    size = f"{parameters / 1e6:,.0f}M weights"
    side = "below" if resolved == "extractive" else "at or above"
    return f"{resolved} (auto: {size}, {side} {SMALL_MODEL_PARAMETERS / 1e9:g}B)"
