"""``Choice``: the one string enum the package's options parse through.

``Choice.parse(value)`` takes a member, its value or a name with other case or spaces around it,
or an alias the enum lists in ``_aliases()``, and raises one
:class:`~llama_index_rag_pack.core.errors.ConfigurationError` that names the option and lists the
valid values.

Example:
    >>> class Colour(Choice):
    ...     RED = "red"
    ...     GREEN = "green"
    >>> Colour.parse(" Red ")
    <Colour.RED: 'red'>
    >>> Colour.parse("blue")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: Unknown colour 'blue'; valid values: red, green.
"""  # noqa: E501  (doctest output is one line)

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from enum import Enum
from typing import Any, TypeVar

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["Choice"]

C = TypeVar("C", bound="Choice")


class Choice(str, Enum):
    """A string enum of option values with one parser and one error."""

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        """Other names accepted for values (lower case), e.g. ``{"rrf": "reciprocal_rank"}``."""
        return {}

    @classmethod
    def label(cls) -> str:
        """What the option is called in errors: the class name in words (``FusionMode`` ->
        ``fusion mode``)."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", cls.__name__).lower()

    @classmethod
    def parse(cls: type[C], value: Any) -> C:
        """The member for ``value``.

        Raises:
            ConfigurationError: no member or alias has that value.
        """
        if isinstance(value, cls):
            return value
        key = str(getattr(value, "value", value)).strip().lower()
        key = cls._aliases().get(key, key)
        try:
            return cls(key)
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(
                f"Unknown {cls.label()} {value!r}; valid values: {valid}."
            ) from None
