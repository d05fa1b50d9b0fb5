"""Where every benchmark writes its result: ``benchmarks/results/<name>.json`` and ``<name>.md``.

The JSON holds the measured values under ``results`` and an ``environment`` block (UTC date,
CPU count, platform, Python, versions of the key packages, the command line, and the peer's own
report when a peer ran). The Markdown starts with one line summarising that environment, then
the tables, then the command that reproduces the run.

Standard library only: a peer side running in its own venv imports it too (``runtime_info``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

_STARTED = time.monotonic()  # imported first thing by every script: its wall time starts here
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = "benchmarks/results"
KEY_PACKAGES = (
    "llama-index-core",
    "llama-index-rag-pack",
    "pymilvus",
    "milvus-lite",
    "numpy",
    "scikit-learn",
    "umap-learn",
    "numba",
    "torch",
    "sentence-transformers",
    "transformers",
)
# The versions named on the first line of every Markdown file (all of them are in the JSON).
HEADLINE_PACKAGES = ("llama-index-core", "llama-index-rag-pack")
PEER_ENV = {
    "raptor": "RAG_PACK_PEER_RAPTOR_PYTHON",
    "lcref": "RAG_PACK_PEER_LCREF_PYTHON",
    "ensemble": "RAG_PACK_PEER_ENSEMBLE_PYTHON",
}


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed version of each distribution, ``"not installed"`` when missing."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def metadata_version(name: str) -> str:
    return package_versions([name])[name]


def runtime_info(packages: Iterable[str] = ()) -> dict[str, Any]:
    """Python, platform and package versions of the running interpreter (what a peer reports)."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": package_versions(packages),
    }


def _git(*args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _git_commit() -> str | None:
    """Short commit of the checkout, ``+modified`` when the measured code differs from it."""
    head = _git("rev-parse", "--short", "HEAD")
    if head is None or head.returncode != 0:
        return None
    # The code that produced the numbers: the package, the running script and these helpers.
    paths = [
        "llama_index_rag_pack",
        "pyproject.toml",
        "benchmarks/_*.py",
        _display_path(sys.argv[0]),
    ]
    diff = _git("diff", "--quiet", "HEAD", "--", *paths)
    return head.stdout.strip() + ("+modified" if diff is not None and diff.returncode else "")


def _display_path(path: str) -> str:
    """``path`` relative to the repository root when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that reproduced this run, from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    return shlex.join(["python", _display_path(argv[0]), *argv[1:]])


def environment(peers: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``environment`` block of a result file."""
    env: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "cpu_count": os.cpu_count(),
        **runtime_info(KEY_PACKAGES),
        "git_commit": _git_commit(),
        "command": command_line(),
        "wall_s": round(time.monotonic() - _STARTED, 1),
    }
    if peers:
        env["peers"] = peers
    return env


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"directory for <name>.json and <name>.md (default: {DEFAULT_OUT}; "
        "a relative path is taken from the repository root)",
    )


def resolve_out(out: str | Path) -> Path:
    path = Path(out)
    return path if path.is_absolute() else REPO_ROOT / path


def peer_python(kind: str, given: str | None) -> Path:
    """The peer interpreter: ``--peer-python``, else the env var, else ``.venv-peer-<kind>``."""
    chosen = given or os.environ.get(PEER_ENV[kind]) or f".venv-peer-{kind}/bin/python"
    path = Path(chosen)
    return path if path.is_absolute() else REPO_ROOT / path


def peer_missing_message(kind: str, python: Path) -> str:
    return (
        f"peer Python not found: {_display_path(str(python))}; create it with "
        f"`benchmarks/make_peer_venv.sh {kind} PATH` and pass --peer-python PATH/bin/python "
        f"(or set {PEER_ENV[kind]}); measuring our side only"
    )


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A Markdown table; ``align`` has one letter per column (``l`` or ``r``, default ``l``)."""
    align = align.ljust(len(header), "l")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _clean(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become null, tuples lists, paths strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def headline(env: dict[str, Any], extra_packages: Sequence[str] = ()) -> str:
    """One line: date, CPUs, Python and the main versions (ours, then each peer's)."""
    packages = env["packages"]
    names = [*HEADLINE_PACKAGES, *(p for p in extra_packages if p not in HEADLINE_PACKAGES)]
    parts = [
        env["date_utc"].replace("T", " ").replace("+00:00", " UTC"),
        f"{env['cpu_count']} CPUs",
        f"Python {env['python']}",
        *(f"{name} {packages.get(name) or metadata_version(name)}" for name in names),
    ]
    if env.get("git_commit"):
        parts.append(f"commit {env['git_commit']}")
    if env.get("wall_s") is not None:
        parts.append(f"run took {env['wall_s']:.0f} s")
    for label, peer in (env.get("peers") or {}).items():
        versions = ", ".join(f"{k} {v}" for k, v in peer.get("packages", {}).items())
        parts.append(f"peer {label}: {versions} (Python {peer.get('python', '?')})")
    return " · ".join(parts)


def write_results(
    name: str,
    results: dict[str, Any],
    tables: Sequence[tuple[str, str]],
    *,
    out: str | Path = DEFAULT_OUT,
    peers: dict[str, Any] | None = None,
    description: str = "",
    notes: Sequence[str] = (),
    peer_kind: str | None = None,
    headline_packages: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``<out>/<name>.json`` and ``<out>/<name>.md``; return both paths.

    Args:
        name: File stem, e.g. ``"raptor_build"``.
        results: The measured values (NaN and infinities are written as null).
        tables: ``(title, markdown table)`` pairs; the first is the headline table that the
            READMEs quote.
        out: Output directory; relative paths are taken from the repository root.
        peers: What each peer side reported about itself (``runtime_info``), by label.
        description: What was measured, printed under the first line.
        notes: Paragraphs printed after the tables.
        peer_kind: ``"raptor"`` or ``"lcref"`` when a peer ran: the Markdown then says how its
            venv is made.
        headline_packages: Versions to name on the first Markdown line besides llama-index-core
            and llama-index-rag-pack (the JSON has every key package).
    """
    directory = resolve_out(out)
    directory.mkdir(parents=True, exist_ok=True)
    env = environment(peers)
    payload = {
        "benchmark": name,
        "environment": env,
        "description": description,
        "results": results,
        "tables": [{"title": title, "markdown": table} for title, table in tables],
        "notes": list(notes),
    }
    json_path = directory / f"{name}.json"
    json_path.write_text(
        json.dumps(_clean(payload), indent=2, ensure_ascii=False, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    parts = [headline(env, headline_packages), ""]
    if description:
        parts += [description, ""]
    for title, table in tables:
        parts += [f"### {title}", "", table.rstrip(), ""]
    for note in notes:
        parts += [note, ""]
    parts += ["Reproduce (from the repository root):", "", f"    {env['command']}", ""]
    if peer_kind:
        parts += [
            f"The peer runs from its own venv: `benchmarks/make_peer_venv.sh {peer_kind} PATH`, "
            f"then `--peer-python PATH/bin/python` or `{PEER_ENV[peer_kind]}=PATH/bin/python` "
            f"(default `.venv-peer-{peer_kind}/bin/python`).",
            "",
        ]
    md_path = directory / f"{name}.md"
    md_path.write_text("\n".join(parts), encoding="utf-8")
    print(f"wrote {_display_path(str(json_path))} and {_display_path(str(md_path))}")
    return json_path, md_path
