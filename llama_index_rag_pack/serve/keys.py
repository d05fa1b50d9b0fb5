"""API keys of ``rag-pack serve``: which callers may ask, and which tenant each one searches.

A key is given as ``KEY`` (any tenant-free collection) or ``KEY=TENANT`` (every search scoped to
``TENANT`` on a collection with tenants; ``KEY=*`` searches all of them). Keys come from
``--api-key`` options, a file of one ``KEY[=TENANT]`` per line (``#`` starts a comment, so a key
in a file cannot hold one), and the ``RAG_PACK_API_KEYS`` environment variable (specs separated
by commas or whitespace). Keys are compared in constant time and never logged or shown:
:func:`repr` counts them.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["ALL_TENANTS", "KEYS_ENV", "AccessDenied", "KeyRing", "bearer_token"]

#: The environment variable read for keys when it is set.
KEYS_ENV = "RAG_PACK_API_KEYS"
#: A key mapped to this searches every tenant.
ALL_TENANTS = "*"
_SEPARATORS = re.compile(r"[\s,]+")
_BEARER = re.compile(r"\s*bearer\s+(\S+)\s*$", re.IGNORECASE)


class AccessDenied(Exception):
    """A request the keys refuse: ``status`` is 401 (no key, or an unknown one) or 403 (a key
    that may not search this collection)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (``None`` for none).

    Example:
        >>> bearer_token("Bearer sk-abc"), bearer_token("Basic xyz"), bearer_token(None)
        ('sk-abc', None, None)
    """
    match = _BEARER.match(authorization or "")
    return match.group(1) if match else None


@dataclass(frozen=True)
class KeyRing:
    """The keys a server accepts, each with its tenant (``None``: no tenant)."""

    tenants: Mapping[str, str | None] = field(default_factory=dict)

    def __repr__(self) -> str:  # never the keys themselves
        scoped = sum(t is not None for t in self.tenants.values())
        return f"KeyRing({len(self.tenants)} keys, {scoped} mapped to tenants)"

    @classmethod
    def parse(cls, specs: Iterable[str]) -> KeyRing:
        """Keys from ``KEY[=TENANT]`` specs.

        Raises:
            ConfigurationError: an empty key or tenant, a key with whitespace, or one key given
                twice with different tenants (the message names neither key).

        Example:
            >>> ring = KeyRing.parse(["k1", "k2=acme", "k3=*"])
            >>> ring.tenants["k2"], ring.tenants["k3"], ring
            ('acme', '*', KeyRing(3 keys, 2 mapped to tenants))
        """
        tenants: dict[str, str | None] = {}
        for number, spec in enumerate(specs, 1):
            key, sep, tenant = spec.strip().partition("=")
            key, tenant = key.strip(), tenant.strip()
            if not key or (sep and not tenant):
                raise ConfigurationError(
                    f"API key #{number} is empty or has an empty tenant: give KEY or KEY=TENANT."
                )
            if any(c.isspace() for c in key):
                raise ConfigurationError(f"API key #{number} contains whitespace.")
            value = tenant if sep else None
            if key in tenants and tenants[key] != value:
                raise ConfigurationError(f"API key #{number} is given twice with two tenants.")
            tenants[key] = value
        return cls(tenants)

    @classmethod
    def gather(
        cls,
        specs: Iterable[str] = (),
        *,
        files: Iterable[str | Path] = (),
        environ: Mapping[str, str] | None = None,
    ) -> KeyRing:
        """Keys from ``specs``, from each file (one spec per line) and from
        ``$RAG_PACK_API_KEYS``.

        Raises:
            ConfigurationError: an unreadable key file, or a bad spec.
        """
        every = [s for s in specs]
        for path in files:
            try:
                lines = Path(path).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigurationError(f"Cannot read the API key file {path}: {e}") from None
            every += [line.split("#", 1)[0] for line in lines if line.split("#", 1)[0].strip()]
        env = (os.environ if environ is None else environ).get(KEYS_ENV, "")
        every += [s for s in _SEPARATORS.split(env) if s]
        return cls.parse(every)

    @property
    def scoped(self) -> bool:
        """Whether any key is mapped to a tenant."""
        return any(t is not None for t in self.tenants.values())

    def check_collection(self, has_tenants: bool) -> None:
        """Raise :class:`ConfigurationError` when a key names a tenant but the collection keeps
        none apart (such a key could never be honoured)."""
        if self.scoped and not has_tenants:
            raise ConfigurationError(
                "An API key is mapped to a tenant, but this collection has no tenants: give "
                "plain keys, or serve a collection created with tenant_field=..."
            )

    def tenant_of(self, token: str | None, *, has_tenants: bool) -> str | None:
        """The tenant a request with ``token`` searches (``None``: a collection without
        tenants; ``"*"``: every tenant).

        Raises:
            AccessDenied: 401 for a missing or unknown key when keys are set, 403 on a
                collection with tenants for a key with no tenant (or no key at all).
        """
        tenant: str | None = None
        if self.tenants:
            if not token:
                raise AccessDenied(
                    401, "Missing API key: send 'Authorization: Bearer <key>'.", "missing_api_key"
                )
            matched = [t for k, t in self.tenants.items() if _same(k, token)]
            if not matched:
                raise AccessDenied(401, "Invalid API key.", "invalid_api_key")
            tenant = matched[0]
        if has_tenants and tenant is None:
            raise AccessDenied(
                403,
                "This collection keeps tenants apart, and this request names none: use a key "
                "mapped to a tenant (--api-key KEY=TENANT, or KEY=* for all of them).",
                "tenant_required",
            )
        return tenant


def _same(key: str, token: str) -> bool:
    return hmac.compare_digest(key.encode("utf-8"), token.encode("utf-8"))
