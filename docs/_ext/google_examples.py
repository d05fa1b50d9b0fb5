"""A griffe extension for the API reference (mkdocs.yml): ``Example:`` is read as ``Examples:``.

The package's docstrings head their doctests ``Example:``, which Google style does not name as a
section, so griffe would render the doctest as prose (``>>>`` lines as a paragraph, ``[1](id=2)``
read as a link). Renaming the heading makes griffe render them as code, as ``Examples:`` does.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE_HEADING = re.compile(r"^(\s*)Example:\s*$", re.M)


class GoogleExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value)
