"""The base of the retrievers that ask an LLM about the query before searching (RAG-Fusion,
HyDE, query rewriting, self-query): the LLM resolved on first use, one prompt exposed through
LlamaIndex's prompt mixin (``get_prompts`` / ``update_prompts``), and the wrapped retriever(s)
as prompt sub-modules."""

from __future__ import annotations

from typing import Any, ClassVar

from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType

from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.models.settings import LazyLLMMixin

__all__ = ["LLMQueryRetriever"]


class LLMQueryRetriever(LazyLLMMixin, PackRetriever):
    """A pack retriever that asks an LLM about the query before searching.

    Subclasses name their prompt (``prompt_key``, what ``get_prompts()`` lists), set
    ``self.retriever`` (or override :meth:`_get_prompt_modules`) and call
    ``super().__init__(llm, prompt, default_prompt, callback_manager, verbose)``.
    """

    #: The prompt's name in ``get_prompts()`` and the attribute that holds it.
    prompt_key: ClassVar[str] = "llm_prompt"

    def __init__(
        self,
        llm: Any | None,
        prompt: str | BasePromptTemplate | None,
        default_prompt: BasePromptTemplate,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self._llm = llm
        if isinstance(prompt, str):
            prompt = PromptTemplate(prompt)
        self.prompt = prompt or default_prompt
        super().__init__(callback_manager=callback_manager or CallbackManager([]), verbose=verbose)

    @property
    def prompt(self) -> BasePromptTemplate:
        """The prompt, also readable as the attribute named ``prompt_key``."""
        return getattr(self, self.prompt_key)

    @prompt.setter
    def prompt(self, value: BasePromptTemplate) -> None:
        setattr(self, self.prompt_key, value)

    def _get_prompts(self) -> PromptDictType:
        return {self.prompt_key: self.prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if self.prompt_key in prompts:
            self.prompt = prompts[self.prompt_key]

    def _get_prompt_modules(self) -> PromptMixinType:
        retriever = getattr(self, "retriever", None)
        return {"retriever": retriever} if retriever is not None else {}
