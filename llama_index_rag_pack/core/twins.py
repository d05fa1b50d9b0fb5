"""Sync/async twins whose parameter list is written once, on the sync function.

A public pair such as ``generate_queries``/``agenerate_queries`` takes the same arguments; the
async one is declared with :func:`async_twin` instead of restating them. Pure Python: nothing
here knows about LlamaIndex or Milvus.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["async_twin"]

P = ParamSpec("P")
_BY_POSITION_ONLY = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
R = TypeVar("R")


def async_twin(
    sync: Callable[P, Any],
) -> Callable[[Callable[..., Awaitable[R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Declare a coroutine function that takes exactly ``sync``'s parameters.

    Each call is bound to ``sync``'s signature first: a wrong call (an unknown keyword, a
    missing argument) is a ``TypeError`` that names the function and the problem, as for
    ``sync``, raised when the call is awaited, and nothing runs. The body is then called with
    every parameter by name, defaults filled in, ``**kwargs`` parameters spread out; it may
    name the parameters it reads and take the rest as ``**options``. ``inspect.signature``,
    ``help()`` and type checkers see ``sync``'s parameters. Decorate the function itself: for
    a ``classmethod`` pair, put ``@classmethod`` above and pass ``sync.__func__``.

    Example:
        >>> def greet(name: str, *, punctuation: str = "!") -> str:
        ...     return f"Hello {name}{punctuation}"
        >>> @async_twin(greet)
        ... async def agreet(name, **options):
        ...     return greet(name, **options)
        >>> import asyncio
        >>> asyncio.run(agreet("Ada"))
        'Hello Ada!'
        >>> str(inspect.signature(agreet))
        "(name: 'str', *, punctuation: 'str' = '!') -> 'str'"
        >>> asyncio.run(agreet("Ada", punct="?"))
        Traceback (most recent call last):
        TypeError: agreet(): got an unexpected keyword argument 'punct'
    """
    signature = inspect.signature(sync)
    if any(p.kind in _BY_POSITION_ONLY for p in signature.parameters.values()):
        raise TypeError(f"async_twin needs parameters that can be passed by name: {sync!r}")
    spread = [
        name
        for name, parameter in signature.parameters.items()
        if parameter.kind is inspect.Parameter.VAR_KEYWORD
    ]

    def decorate(body: Callable[..., Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        if not inspect.iscoroutinefunction(body):
            raise TypeError(f"async_twin decorates a coroutine function, not {body!r}")

        @functools.wraps(body)
        async def twin(*args: Any, **kwargs: Any) -> R:
            try:
                arguments = _by_name(signature, spread, args, kwargs)
            except TypeError as e:
                raise TypeError(f"{body.__qualname__}(): {e}") from None
            return await body(**arguments)

        twin.__signature__ = signature  # type: ignore[attr-defined]
        del twin.__wrapped__  # inspect would follow it to the body's own parameters
        return twin

    return decorate


def _by_name(
    signature: inspect.Signature, spread: list[str], args: tuple, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The call bound to ``signature``, every parameter by name (``**kwargs`` spread out)."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    for name in spread:
        arguments.update(arguments.pop(name))
    return arguments
