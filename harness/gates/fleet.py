"""Fleet and prefix-cache gates (suites/test_fleet.py): is the router doing its job? The
prefix-cache hit rate of an arm (a floor, or a gain over another arm: cache-aware routing
against round robin on the same prompts), and how evenly a fleet's workers shared the
requests (harness/measure/fleet.py).

The hit rate is a count, not a timing: the server's cached prompt tokens over its prompt
tokens across the measured requests (harness/measure/server_metrics.py), the same prompts
for every arm of a workload. It has no interval to draw, so these gates compare the counts
as they are; a server that exports no such counters leaves them unmeasured (failed, said so).
"""

from __future__ import annotations

from harness.gates.registry import GateConfigError, GateContext, keyed_arms, register, unmeasured
from harness.gates.verdict import Verdict, at_least, at_most, not_configured

HIT_RATE = "prefix_cache_hit_rate"


def hit_rate_of(result) -> float | None:
    return result.value(HIT_RATE) if result is not None else None


@register("min_prefix_cache_hit_rate", "fleet", ("min_prefix_cache_hit_rate",), keyed_arms("min_prefix_cache_hit_rate"))
def min_prefix_cache_hit_rate(ctx: GateContext) -> list[Verdict]:
    """The server's prefix-cache hit rate over the measured requests at least gate.min_prefix_cache_hit_rate[arm]."""
    name, arm = "min_prefix_cache_hit_rate", ctx.arm
    if arm not in ctx.gate.min_prefix_cache_hit_rate:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    return [at_least(name, arm, hit_rate_of(ctx.result), ctx.gate.min_prefix_cache_hit_rate[arm],
                     "prefix-cache hit rate (the server's counters)")]


def check_gain_arms(gate, arms: list[str], plain_arm: str | None) -> None:
    for arm, gain in (gate.min_prefix_cache_hit_rate_gain or {}).items():
        if gain.over not in arms or gain.over == arm:
            raise GateConfigError(f"gate.min_prefix_cache_hit_rate_gain.{arm}.over is '{gain.over}': name another arm "
                                  f"of this experiment ({', '.join(a for a in arms if a != arm)})")


@register("min_prefix_cache_hit_rate_gain", "fleet", ("min_prefix_cache_hit_rate_gain",),
          keyed_arms("min_prefix_cache_hit_rate_gain"), validate=check_gain_arms)
def min_prefix_cache_hit_rate_gain(ctx: GateContext) -> list[Verdict]:
    """This arm's prefix-cache hit rate at least arm `over`'s plus `by`, over the same prompts
    (e.g. cache-aware routing against round robin)."""
    name, arm = "min_prefix_cache_hit_rate_gain", ctx.arm
    if arm not in ctx.gate.min_prefix_cache_hit_rate_gain:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    gain = ctx.gate.min_prefix_cache_hit_rate_gain[arm]
    mine, theirs = hit_rate_of(ctx.result), hit_rate_of(ctx.results.get(gain.over))
    if mine is None or theirs is None:
        who = arm if mine is None else gain.over
        return [Verdict(name, arm, False, mine, gain.by, f"{arm}: the prefix-cache hit rate of {who} was not measured "
                                                         f"(its server exports no prefix-cache counters, or it did not run)")]
    passed = mine - theirs >= gain.by
    relation = "meets" if passed else "misses"
    return [Verdict(name, arm, passed, mine - theirs, gain.by,
                    f"{arm}: prefix-cache hit rate {mine:.1%} against {gain.over}'s {theirs:.1%}: a gain of "
                    f"{(mine - theirs) * 100:+.1f} points {relation} the {gain.by * 100:+.1f} asked")]


@register("max_worker_imbalance", "fleet", ("max_worker_imbalance",), keyed_arms("max_worker_imbalance"))
def max_worker_imbalance(ctx: GateContext) -> list[Verdict]:
    """A fleet's requests per worker, max ÷ mean, at most gate.max_worker_imbalance[arm] (1.0: even)."""
    name, arm = "max_worker_imbalance", ctx.arm
    if arm not in ctx.gate.max_worker_imbalance:
        return [not_configured(name, arm)]
    if (missing := unmeasured(name, ctx)) is not None:
        return missing
    if not ctx.fleet:
        return [Verdict(name, arm, False, None, ctx.gate.max_worker_imbalance[arm],
                        f"{arm}: one server, no fleet to balance (set server.workers > 1, or drop this gate)")]
    shares = ", ".join(f"{w['worker']} {w.get('requests_finished', '?'):g}" if isinstance(w.get('requests_finished'), float)
                       else f"{w['worker']} ?" for w in ctx.fleet.get("workers", []))
    verdict = at_most(name, arm, (ctx.fleet.get("imbalance") or {}).get("requests_max_over_mean"),
                      ctx.gate.max_worker_imbalance[arm], f"requests per worker, max ÷ mean ({shares})")
    return [verdict]
