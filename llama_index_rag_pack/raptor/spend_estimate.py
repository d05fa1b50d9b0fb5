"""What a RAPTOR build is expected to spend, level by level, and the report of what it spent.

A :class:`RaptorEstimate` holds, per summary level, the clusters the clustering gives, how many
of them cost an LLM call (clusters of one are carried up without one; summaries already stored
are reused), and the tokens of those calls: the prompt (the summary prompt around the cluster's
texts) and the predicted summary. How each level was found is in its ``method``:

``clustered``  the clustering the build runs, on the nodes it will cluster (level 1 always: the
               chunks and their embeddings exist; a higher level when every node under it is
               already stored)
``predicted``  clustering of stand-ins for summaries not written yet: each new summary is its
               children's mean embedding (normalised) with the predicted summary length
``sampled``    a seeded sample of the chunks estimated as above, every figure scaled to the whole
               set (very many chunks, where clustering them all is the cost)

A summary is predicted at :data:`SUMMARY_SHARE` of its children's tokens (the ratio the RAPTOR
paper measured for its summaries, 0.28), at most the LLM's maximum output. Once a tree holds
summaries of this LLM, their own median ratio is used instead.

The estimate also gives a ceiling that holds whatever the clustering does: a level is built
only when the level below has ``min_compression`` times as many nodes as its clusters, so level
``L`` has at most ``n / min_compression**L`` summaries, each prompt at most the cluster budget
plus the prompt template (the chunks' metadata the LLM sees comes on top), each reply at most
the LLM's maximum output.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "SUMMARY_SHARE",
    "LevelEstimate",
    "RaptorEstimate",
    "predicted_summary_tokens",
    "report_lines",
    "spend_ceiling",
]

#: A summary's length as a share of its children's tokens: the average compression ratio the
#: RAPTOR paper reports for its summaries (0.28, a 72% compression; an average of each summary's
#: own ratio). A default only: a tree that holds summaries is measured instead.
SUMMARY_SHARE = 0.28


def predicted_summary_tokens(context_tokens: int, share: float, max_output: int | None) -> int:
    """Tokens of the summary of ``context_tokens`` tokens of text.

    Example:
        >>> predicted_summary_tokens(1000, 0.28, None), predicted_summary_tokens(1000, 0.28, 256)
        (280, 256)
    """
    tokens = max(1, round(share * context_tokens))
    return min(tokens, max_output) if max_output else tokens


def spend_ceiling(
    leaves: int, *, max_levels: int, min_compression: float, per_call_input: int
) -> tuple[int, int]:
    """The most summary calls a build over ``leaves`` nodes can make, and the most prompt tokens
    they can send (``per_call_input`` each).

    Example:
        >>> spend_ceiling(100, max_levels=5, min_compression=2.0, per_call_input=1000)
        (96, 96000)
    """
    calls, nodes = 0, leaves
    for _ in range(max_levels):
        if nodes < 2:
            break
        nodes = int(nodes / min_compression)
        calls += nodes
    return calls, calls * per_call_input


@dataclass
class LevelEstimate:
    """One summary level of an estimate.

    Attributes:
        level: The level made (1: the summaries of the chunks).
        nodes_below: Nodes of the level clustered.
        clusters: Clusters found (the nodes of this level).
        calls: Summaries to write (one LLM call each, retries not counted).
        carried: Clusters of one, carried up without a call.
        reused: Summaries already stored (no call).
        input_tokens: Prompt tokens of the calls.
        output_tokens: Predicted summary tokens of the calls.
        method: ``clustered``, ``predicted`` or ``sampled`` (see the module).
    """

    level: int
    nodes_below: int
    clusters: int
    calls: int
    carried: int
    reused: int
    input_tokens: int
    output_tokens: int
    method: str


@dataclass
class RaptorEstimate:
    """What the next build is expected to spend (only the remaining work of a partial tree).

    Attributes:
        leaves: Chunks the tree is built on.
        method: ``clustered`` or ``sampled`` (how level 1 was found).
        levels: One entry per summary level expected.
        summary_share: Predicted summary length as a share of its children's tokens.
        share_source: Where ``summary_share`` comes from.
        max_output: The LLM's maximum output tokens (``None``: unknown).
        ceiling_calls: Most calls any clustering can lead to.
        ceiling_input_tokens: Most prompt tokens of those calls.
        sample: Chunks clustered when ``method`` is ``sampled``.
        seconds: Time the estimate took.
    """

    leaves: int
    method: str
    levels: list[LevelEstimate] = field(default_factory=list)
    summary_share: float = SUMMARY_SHARE
    share_source: str = "RAPTOR paper"
    max_output: int | None = None
    ceiling_calls: int = 0
    ceiling_input_tokens: int = 0
    sample: int | None = None
    seconds: float = 0.0

    @property
    def calls(self) -> int:
        return sum(lv.calls for lv in self.levels)

    @property
    def input_tokens(self) -> int:
        return sum(lv.input_tokens for lv in self.levels)

    @property
    def output_tokens(self) -> int:
        return sum(lv.output_tokens for lv in self.levels)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def cost(self, price_in: float | None, price_out: float | None) -> float | None:
        """USD at these prices per million tokens (``None`` when neither is given)."""
        if price_in is None and price_out is None:
            return None
        return (self.input_tokens * (price_in or 0) + self.output_tokens * (price_out or 0)) / 1e6

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            calls=self.calls, input_tokens=self.input_tokens, output_tokens=self.output_tokens
        )
        return out

    def lines(self, price_in: float | None = None, price_out: float | None = None) -> list[str]:
        """The estimate for a terminal: a line per level, the total, the ceiling, the cost."""
        how = (
            f"a sample of {self.sample or 0:,} of the {self.leaves:,} chunks clustered, scaled"
            if self.method == "sampled"
            else f"level 1 from the clustering of the {self.leaves:,} chunks"
        )
        out = [
            f"estimate  : {how}; higher levels predicted from the clusters below "
            f"(summaries at {self.summary_share:.2f} of their input, {self.share_source}"
            + (f", at most {self.max_output} tokens" if self.max_output else "")
            + ")",
            f"  {'level':>5}  {'method':<9}  {'clusters':>8}  {'calls':>6}  {'carried':>7}  "
            f"{'reused':>6}  {'input tok':>10}  {'output tok':>10}",
        ]
        for lv in self.levels:
            out.append(
                f"  {lv.level:>5}  {lv.method:<9}  {lv.clusters:>8,}  {lv.calls:>6,}  "
                f"{lv.carried:>7,}  {lv.reused:>6,}  {lv.input_tokens:>10,}  "
                f"{lv.output_tokens:>10,}"
            )
        out.append(
            f"  {'total':>5}  {'':<9}  {'':>8}  {self.calls:>6,}  {'':>7}  {'':>6}  "
            f"{self.input_tokens:>10,}  {self.output_tokens:>10,}"
        )
        out.append(
            f"  ceiling : at most {self.ceiling_calls:,} calls and "
            f"{self.ceiling_input_tokens:,} input tokens, whatever the clustering"
        )
        cost = self.cost(price_in, price_out)
        if cost is not None:
            out.append(
                f"  cost    : ${cost:,.4f} at ${price_in or 0:g} / ${price_out or 0:g} per million "
                "input / output tokens"
            )
        return out


@dataclass(frozen=True)
class _Nothing:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


_NOTHING = _Nothing()


def _error(estimated: float, actual: float) -> str:
    if actual == 0:
        return "" if estimated == 0 else "n/a"
    return f"{(estimated - actual) / actual:+.0%}"


def report_lines(
    stats: Any,
    estimate: RaptorEstimate | None = None,
    price_in: float | None = None,
    price_out: float | None = None,
) -> list[str]:
    """What a build spent (a :class:`~llama_index_rag_pack.raptor.tree_options.BuildStats`),
    per level and in total, beside ``estimate`` when there is one."""
    counted = " (counted with the tokenizer: the LLM reported none)" if stats.tokens_counted else ""
    out = [f"  {'level':>5}  {'calls':>13}  {'input tok':>21}  {'output tok':>21}"]
    planned = {lv.level: lv for lv in (estimate.levels if estimate else [])}

    def cell(actual: int, guess: int | None) -> str:
        if guess is None:
            return f"{actual:,}"
        return f"{actual:,} / {guess:,} {_error(guess, actual)}"

    for level in sorted(set(stats.per_level) | set(planned)):
        spent, lv = stats.per_level.get(level), planned.get(level)
        calls, tin, tout = (
            (spent.calls, spent.prompt_tokens, spent.completion_tokens) if spent else (0, 0, 0)
        )
        out.append(
            f"  {level:>5}  {cell(calls, lv and lv.calls):>13}  "
            f"{cell(tin, lv and lv.input_tokens):>21}  {cell(tout, lv and lv.output_tokens):>21}"
        )
    est = estimate
    out.append(
        f"  {'total':>5}  {cell(stats.llm_calls, est and est.calls):>13}  "
        f"{cell(stats.prompt_tokens, est and est.input_tokens):>21}  "
        f"{cell(stats.completion_tokens, est and est.output_tokens):>21}"
    )
    if estimate is not None:
        out[0] += "   (actual / estimate, error)"
    if counted:
        out.append(f"  tokens{counted}")
    if price_in is not None or price_out is not None:
        cost = (
            stats.prompt_tokens * (price_in or 0) + stats.completion_tokens * (price_out or 0)
        ) / 1e6
        out.append(f"  cost    : ${cost:,.4f}")
    return out
