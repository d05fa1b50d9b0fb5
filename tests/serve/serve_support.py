"""What the ``rag-pack serve`` tests share besides fixtures (``conftest.py`` has those): the
articles and tenant notes, scripted replies that read their prompt the way a model does, and a
uvicorn server on 127.0.0.1 in a thread of the test process. A module of its own name, so a test
imports it without meeting another folder's ``conftest``."""

from __future__ import annotations

import re
import socket
import threading
import time
from typing import Any

import pytest
from llama_index.core import Document

uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")

from llama_index_rag_pack.serve.keys import KeyRing  # noqa: E402
from llama_index_rag_pack.serve.service import PackService  # noqa: E402

ARTICLES = {
    "Andorra": "Andorra is a small landlocked country in the Pyrenees. The capital of Andorra is "
    "Andorra la Vella, the highest capital city in Europe at 1,023 metres.",
    "Aikido": "Aikido is a Japanese martial art. Aikido was developed by Morihei Ueshiba as a "
    "synthesis of his martial studies, philosophy and religious beliefs.",
    "Apollo 11": "Apollo 11 was the first crewed mission to land on the Moon. Neil Armstrong and "
    "Buzz Aldrin landed the lunar module Eagle on July 20, 1969.",
    "Aardvark": "The aardvark is a nocturnal burrowing mammal native to Africa. The aardvark eats "
    "ants and termites, which it digs out of their hills with its claws.",
    "Abacus": "The abacus is a calculating tool used since ancient times. Beads are moved along "
    "rods to count, add and subtract.",
}
#: The fact each question asks for: the answer sentence, and a fragment the cited passage holds.
FACTS = {
    "capital": ("The capital of Andorra is Andorra la Vella", "Andorra la Vella"),
    "high": ("Andorra la Vella lies at 1,023 metres", "1,023"),
    "aikido": ("Aikido was developed by Morihei Ueshiba", "Ueshiba"),
    "aardvark": ("The aardvark eats ants and termites", "termites"),
    "moon": ("Neil Armstrong and Buzz Aldrin landed on the Moon", "Armstrong"),
}
TENANTS = {"acme": "PELICAN", "globex": "WALRUS"}


def documents() -> list[Document]:
    return [
        Document(
            id_=title.lower().replace(" ", "-"),
            text=text,
            metadata={"title": title, "url": f"https://en.wikipedia.org/wiki/{title}"},
        )
        for title, text in ARTICLES.items()
    ]


def tenant_documents() -> list[Document]:
    docs = []
    for tenant, secret in TENANTS.items():
        for i, topic in enumerate(("vault code", "payroll budget", "launch plan")):
            docs.append(
                Document(
                    id_=f"{tenant}-{i}",
                    text=f"The {topic} of {tenant} is filed under the secret word {secret}. "
                    f"Only {tenant} may read about its {topic}.",
                    metadata={"tenant": tenant, "title": f"{tenant} {topic}"},
                )
            )
    return docs


def _condense(prompt: str) -> str:
    """Resolve "it"/"its" in the last message to the subject the conversation named last."""
    history = prompt.split("Conversation:", 1)[1].split("Last message:", 1)[0]
    message = prompt.split("Last message:", 1)[1].split("\n", 1)[0].strip()
    subjects = ("Andorra la Vella", "Andorra", "Aikido", "aardvark", "Apollo 11")
    last = max(subjects, key=lambda s: (history.rfind(s), len(s)))
    question = re.sub(r"\bits\b", f"{last}'s", re.sub(r"^And\s+", "", message))
    question = re.sub(r"\bit\b", last, question)
    return f'Sure! Here is the standalone question:\n"{question}"'


def _documents_in(prompt: str) -> list[tuple[str, str]]:
    return re.findall(r"<document id=(\d+)[^>]*>\n(.*?)\n</document>", prompt, re.S)


def facts_reply(prompt: str) -> str:
    """A model's answer: the fact the question asks for, citing the passage that holds it."""
    if "Standalone question:" in prompt:
        return _condense(prompt)
    question = prompt.rsplit("Question:", 1)[-1].lower()
    key = next((k for k in FACTS if k in question), None)
    if key is None:
        return "I could not find that in the documents."
    sentence, fact = FACTS[key]
    cited = next((i for i, text in _documents_in(prompt) if fact in text), None)
    return f"{sentence} [1](id={cited})." if cited else "I could not find that in the documents."


def quoting_reply(prompt: str) -> str:
    """An answer that quotes the first passage it was shown (so a leak would show in it)."""
    if "Standalone question:" in prompt:
        return _condense(prompt) if "Conversation:" in prompt else prompt
    docs = _documents_in(prompt)
    if not docs:
        return "Nothing in the documents answers that."
    first_id, text = docs[0]
    return f"{text.split('.')[0]} [1](id={first_id})."


class RunningServer:
    """uvicorn serving an app on 127.0.0.1 in a thread (stopped by :meth:`stop`)."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                pytest.fail("the test server did not start")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def service_of(pack: Any, keys: Any = (), **kwargs: Any) -> PackService:
    """A service over an open ``pack`` with ``keys`` (``KEY[=TENANT]`` specs)."""
    return PackService(lambda: pack, keys=KeyRing.parse(keys), **kwargs)
