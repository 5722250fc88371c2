"""The simulator's timing model: pure arithmetic, no I/O.

Everything a benchmark needs to know the *true* speed of a simulated server lives
here, so a test can compute the expected ITL / throughput / accept length from the
same flags the server was launched with, without starting it.

Speculative decoding is modelled as EAGLE with a top-k 1 draft chain:
one cycle = ``num_steps`` draft-model steps + one verify forward over
``num_draft_tokens`` tokens.  Draft position ``i`` is accepted with probability
``accept_probs[i]`` given that every earlier position was accepted; a cycle emits
``1 + accepted`` tokens (the verify forward always yields a bonus token).

Acceptance may depend on the prompt's content, as a real drafter's does (code and
repetition accept far more than open prose): ``accept_by_text`` maps a marker text to its
own ``accept_probs``; a request whose prompt contains a marker uses the first such
marker's probabilities (in the mapping's order), any other request ``accept_probs``. So
each kind of content has a known true accept length (:meth:`SimModel.expected_accept_length`).

**The compute-bound knee (a roofline in one number).** A step's cost above is what a
decode pass costs while it is *memory-bound*: reading the weights (the step's batch-1 time)
and each running request's KV cache (``batch_scaling`` per extra request). A forward pass of
the target model over ``n`` tokens turns *compute-bound* once ``n`` passes the knee,
``compute_knee_tokens`` (the roofline's ridge expressed in tokens: the arithmetic of that
many tokens takes as long as the memory traffic), and from there its time grows in
proportion to ``n``::

    pass(n, b) = memory-bound cost(b) x max(1, n / compute_knee_tokens)

``n`` is ``b`` for a plain decode step and ``b x num_draft_tokens`` for the verify forward,
so verification turns compute-bound ``num_draft_tokens`` times sooner than plain decoding:
that is why speculation stops paying as batches grow. Draft steps are the small draft
model's (a few percent of the target's arithmetic per token), whose own knee lies far past
any batch the simulator runs, so they stay memory-bound. Prefill already costs per token
(``prefill_ms_per_token``) and is left as it is. No knee (``None`` or 0) is the plain model
above, exactly. :meth:`SimModel.expected_speedup` and :meth:`SimModel.expected_crossover_batch`
give the truth a sweep over concurrency measures.

**Forced acceptance (benchmark only).** SGLang can accept drafts at a set rate whatever the
drafter proposes (srt/speculative/eagle_utils.py ``_generate_simulated_accept_index``), and so
can the simulator: with ``SGLANG_SIMULATE_ACC_LEN=L`` (env; on when > 0) each verify step draws
one length ``n`` in [1, num_steps + 1] for the *whole batch* by ``SGLANG_SIMULATE_ACC_METHOD``:
``multinomial`` (SGLang's default) rounds a normal(L, 1) clamped to the range, whose mean is not
L near the ends; ``match-expected`` draws the two lengths around L so the mean is L exactly.
``--sim-forced-accept-rates r1,r2,...`` (the simulator's own; vLLM's synthetic_acceptance_rates)
gives per-position unconditional rates instead: each request, each cycle, accepts position i
with probability r_i / r_(i-1). Either way the drafts and the model's output do not matter any
more: every token after the first is a filler (harness/sim/tokens.py) and a request runs to its
max_tokens. :meth:`SimModel.expected_accept_length` is then the forced mode's exact mean.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from dataclasses import dataclass, field
from typing import Mapping

from harness.sim.drift import DriftModel

# Points of the log grid from batch 1 to max_running_requests that the crossover search scans
# before it bisects (fine enough that a speedup curve cannot cross 1.0 twice between two).
CROSSOVER_GRID = 2000

# Algorithms that SGLang runs as draft-then-verify speculative decoding.
SPECULATIVE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "MTP"})

# SGLang's simulated acceptance: its env knobs and the methods it knows (others: ValueError)
SIMULATE_ACC_LEN, SIMULATE_ACC_METHOD = "SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_METHOD"
MULTINOMIAL, MATCH_EXPECTED = "multinomial", "match-expected"


def parse_accept_probs(text: str | list[float] | tuple[float, ...]) -> list[float]:
    """Parse ``"0.6,0.667"`` into floats in [0, 1]."""
    if isinstance(text, (list, tuple)):
        values = [float(v) for v in text]
    else:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    if not values:
        raise ValueError("--sim-accept-probs needs at least one value")
    for v in values:
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"accept probability {v} is outside [0, 1]")
    return values


def parse_accept_by_text(text: str | dict) -> dict[str, list[float]]:
    """``'{"Count from": [0.95, 0.9]}'`` (JSON) into {marker: probabilities}."""
    data = json.loads(text) if isinstance(text, str) else dict(text)
    if not isinstance(data, dict):
        raise ValueError("--sim-accept-by-text needs a JSON object {marker text: [probabilities]}")
    return {str(marker): parse_accept_probs(probs) for marker, probs in data.items() if str(marker)}


def forced_from_env(env: Mapping[str, str]) -> tuple[float | None, str]:
    """SGLang's simulated acceptance as its environment sets it: (mean length or None, method).
    The length is on only above 0 (SGLang's default, -1, is off); the method defaults to
    multinomial, as SGLang's does."""
    text = str(env.get(SIMULATE_ACC_LEN) or "").strip()
    method = str(env.get(SIMULATE_ACC_METHOD) or "").strip() or MULTINOMIAL
    if not text:
        return None, method
    try:
        length = float(text)
    except ValueError:
        raise ValueError(f"{SIMULATE_ACC_LEN}={text!r} is not a number") from None
    return (length if length > 0 else None), method  # NaN is not > 0: off, as in SGLang


def parse_forced_rates(text: str | list[float] | None) -> list[float] | None:
    """``"0.8,0.5"`` (--sim-forced-accept-rates) into floats; None or empty: not set."""
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        return [float(v) for v in text] or None
    try:
        values = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--sim-forced-accept-rates {text!r} is not a comma list of numbers") from None
    return values or None


def check_forced(length: float | None, method: str, rates: list[float] | None, num_steps: int) -> None:
    """Refuse (ValueError, one sentence) what SGLang or vLLM would refuse of a forced acceptance."""
    if length is not None and rates is not None:
        raise ValueError(f"{SIMULATE_ACC_LEN} and --sim-forced-accept-rates both force the acceptance: set one")
    if length is not None and not math.isfinite(length):
        raise ValueError(f"{SIMULATE_ACC_LEN}={length} is not a finite number of tokens")
    if length is not None and method not in (MULTINOMIAL, MATCH_EXPECTED):
        raise ValueError(f"{SIMULATE_ACC_METHOD}={method!r} is not one of SGLang's methods "
                         f"({MULTINOMIAL}, {MATCH_EXPECTED})")
    if rates is None:
        return
    if len(rates) != num_steps:
        raise ValueError(f"--sim-forced-accept-rates has {len(rates)} rate(s) but a cycle drafts {num_steps} "
                         f"token(s): give one per draft position")
    if any(not 0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"--sim-forced-accept-rates {rates} has a rate outside [0, 1]")
    if any(later > earlier for earlier, later in zip(rates, rates[1:])):
        raise ValueError(f"--sim-forced-accept-rates {rates} increases, but each is the share of cycles that "
                         f"accept that position and every one before it")


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def fit_accept_probs(probs: list[float], num_steps: int) -> list[float]:
    """Pad with the last value / truncate so there is one probability per draft step."""
    if num_steps <= 0:
        return []
    if len(probs) >= num_steps:
        return list(probs[:num_steps])
    return list(probs) + [probs[-1]] * (num_steps - len(probs))


@dataclass
class SimModel:
    """Timing + acceptance model of one simulated server (all times in ms)."""

    # Named ``decode_ms`` (not ``decode_step_ms``) because ``decode_step_ms(batch)``
    # is the method that applies batch scaling to it.
    decode_ms: float = 12.2
    draft_step_ms: float = 3.0
    verify_base_ms: float = 12.2
    verify_per_token_ms: float = 3.9
    accept_probs: list[float] = field(default_factory=lambda: [0.6, 0.667])
    accept_by_text: dict[str, list[float]] = field(default_factory=dict)  # marker text -> its accept_probs
    prefill_base_ms: float = 5.0
    prefill_ms_per_token: float = 0.05
    batch_scaling: float = 0.01
    max_running_requests: int = 256
    startup_s: float = 1.0
    seed: int = 0
    lossy_rate: float = 0.0  # share of accepted draft tokens that come out wrong (a fault; 0: lossless)
    speculative: bool = False
    num_steps: int = 2
    num_draft_tokens: int = 3
    compute_knee_tokens: float | None = None  # tokens per target pass past which it is compute-bound; None/0: never
    drift: DriftModel = field(default_factory=DriftModel)  # how the box drifts (drift.py); none by default
    page_size: int = 1  # the prefix cache's page in tokens (SGLang's --page-size; harness/sim/prefix_cache.py)
    prefix_cache: bool = True  # False: --disable-radix-cache, no prompt is ever cached
    # Forced acceptance (module doc; only when speculative): SGLANG_SIMULATE_ACC_LEN's mean length
    # (None: off) and its method, or --sim-forced-accept-rates' unconditional rate per draft position
    forced_accept_length: float | None = None
    forced_accept_method: str = MULTINOMIAL
    forced_accept_rates: list[float] | None = None

    def __post_init__(self) -> None:
        # Keep exactly one conditional probability per draft step.
        self.accept_probs = fit_accept_probs(parse_accept_probs(self.accept_probs), self.num_steps)
        self.accept_by_text = {marker: fit_accept_probs(probs, self.num_steps)
                               for marker, probs in parse_accept_by_text(self.accept_by_text).items()}
        self.forced_accept_rates = parse_forced_rates(self.forced_accept_rates)
        if self.forced_accept_length is not None and not self.forced_accept_length > 0:
            self.forced_accept_length = None  # SGLang's off (its default is -1)
        if self.speculative:  # a plain server drafts nothing: SGLang never reads these then
            check_forced(self.forced_accept_length, self.forced_accept_method, self.forced_accept_rates, self.num_steps)

    # ----------------------------------------------------------------- building
    @classmethod
    def from_args(cls, ns: argparse.Namespace, env: Mapping[str, str] | None = None) -> "SimModel":
        """Build from the parsed command line (see ``harness.sim.cli``) and the environment
        the server runs in (SGLang's simulated acceptance; default: this process's)."""
        forced_length, forced_method = forced_from_env(os.environ if env is None else env)
        algo = getattr(ns, "speculative_algorithm", None)
        speculative = bool(algo) and str(algo).upper() in SPECULATIVE_ALGORITHMS
        num_steps = getattr(ns, "speculative_num_steps", None)
        num_draft = getattr(ns, "speculative_num_draft_tokens", None)
        if num_steps is None:
            num_steps = 2 if num_draft is None else max(1, int(num_draft) - 1)
        if num_draft is None:
            num_draft = int(num_steps) + 1
        return cls(
            decode_ms=ns.sim_decode_step_ms,
            draft_step_ms=ns.sim_draft_step_ms,
            verify_base_ms=ns.sim_verify_base_ms,
            verify_per_token_ms=ns.sim_verify_per_token_ms,
            accept_probs=parse_accept_probs(ns.sim_accept_probs),
            accept_by_text=parse_accept_by_text(getattr(ns, "sim_accept_by_text", None) or "{}"),
            prefill_base_ms=ns.sim_prefill_base_ms,
            prefill_ms_per_token=ns.sim_prefill_ms_per_token,
            batch_scaling=ns.sim_batch_scaling,
            max_running_requests=ns.sim_max_running_requests,
            startup_s=ns.sim_startup_s,
            seed=ns.sim_seed,
            lossy_rate=ns.sim_lossy_rate,
            speculative=speculative,
            num_steps=int(num_steps),
            num_draft_tokens=int(num_draft),
            compute_knee_tokens=getattr(ns, "sim_compute_knee_tokens", None) or None,
            drift=DriftModel(ns.sim_drift_speed_sd, ns.sim_drift_wander_sd, ns.sim_drift_wander_s,
                             ns.sim_drift_jitter_sd, ns.sim_drift_seed, ns.sim_drift_machine_sd,
                             ns.sim_drift_machine_s, ns.sim_drift_machine_seed).seeded(),
            page_size=max(1, int(getattr(ns, "page_size", None) or 1)),
            prefix_cache=not getattr(ns, "disable_radix_cache", False),
            forced_accept_length=forced_length,
            forced_accept_method=forced_method,
            forced_accept_rates=parse_forced_rates(getattr(ns, "sim_forced_accept_rates", None)),
        )

    # ------------------------------------------------------------------ timing
    def batch_factor(self, batch: float = 1) -> float:
        """Slow-down of one step that runs ``batch`` requests together."""
        return 1.0 + self.batch_scaling * (max(1, batch) - 1)

    def compute_factor(self, tokens: float) -> float:
        """Slow-down of a target-model pass over ``tokens`` tokens past the compute-bound knee
        (1.0 up to the knee, or with no knee): its time grows in proportion to the tokens."""
        knee = self.compute_knee_tokens
        if not knee or tokens <= knee:
            return 1.0
        return tokens / knee

    def decode_step_ms(self, batch: float = 1) -> float:
        """One plain (non-speculative) decode step: one target pass over ``batch`` tokens."""
        return self.decode_ms * self.batch_factor(batch) * self.compute_factor(max(1, batch))

    def verify_cycle_ms(self, batch: float = 1) -> float:
        """One speculative cycle: all draft steps plus the verify forward, which passes
        ``batch x num_draft_tokens`` tokens through the target model."""
        compute = self.compute_factor(max(1, batch) * self.num_draft_tokens)
        one = (
            self.num_steps * self.draft_step_ms
            + self.verify_base_ms * compute
            + self.verify_per_token_ms * self.num_draft_tokens * compute
        )
        return one * self.batch_factor(batch)

    def step_ms(self, batch: int = 1) -> float:
        """One decode-phase step of the scheduler (a plain step or a spec cycle)."""
        return self.verify_cycle_ms(batch) if self.speculative else self.decode_step_ms(batch)

    def prefill_ms(self, n_tokens: int, batch: int = 1) -> float:
        """A prefill step over ``n_tokens`` input tokens of ``batch`` requests."""
        return (self.prefill_base_ms + self.prefill_ms_per_token * n_tokens) * self.batch_factor(batch)

    # -------------------------------------------------------------- acceptance
    def accept_probs_for(self, prompt_text: str) -> list[float]:
        """The acceptance of a request with this prompt: its first marker's, else the default."""
        for marker, probs in self.accept_by_text.items():
            if marker in prompt_text:
                return probs
        return self.accept_probs

    def expected_accept_length(self, probs: list[float] | None = None) -> float:
        """Expected tokens per cycle: 1 + sum_i prod_{j<=i} p_j (1.0 without speculation);
        ``probs`` a content's own (:meth:`accept_probs_for`), else the default. Under forced
        acceptance the forced mode's mean, whatever the content."""
        if not self.speculative:
            return 1.0
        if self.forced:
            return self.forced_accept_mean()
        total, run = 1.0, 1.0
        for p in (self.accept_probs if probs is None else probs):
            run *= p
            total += run
        return total

    # ------------------------------------------------------- forced acceptance
    @property
    def forced(self) -> bool:
        """Whether acceptance is forced (and drafts, and the model's output, no longer matter)."""
        return self.speculative and (self.forced_accept_length is not None or self.forced_accept_rates is not None)

    def forced_accept_mean(self) -> float:
        """The forced mode's exact mean tokens per cycle. multinomial: n = round(clamp(x, 1, K+1))
        with x ~ normal(L, 1), so n >= j + 1 exactly when x >= j + 0.5 (j = 1..K), and
        E[n] = 1 + sum_j P(x >= j + 0.5); match-expected: L clamped; rates: 1 + their sum."""
        if self.forced_accept_rates is not None:
            return 1.0 + sum(self.forced_accept_rates)
        length, top = self.forced_accept_length, self.num_steps + 1
        if self.forced_accept_method == MATCH_EXPECTED:
            return min(max(length, 1.0), top)
        return 1.0 + sum(1.0 - _normal_cdf(j + 0.5 - length) for j in range(1, top))

    def draw_forced_length(self, rng: random.Random) -> int:
        """One verify step's tokens (bonus included) for the whole batch, drawn as SGLang's
        _generate_simulated_accept_index draws it."""
        length, top = self.forced_accept_length, self.num_steps + 1
        if self.forced_accept_method == MATCH_EXPECTED:
            length = min(max(length, 1.0), top)
            lower = int(length)
            upper = lower + 1 if lower < top else lower
            return upper if rng.random() < length - lower else lower
        return int(round(min(max(rng.gauss(length, 1.0), 1.0), top)))

    def forced_conditional_probs(self) -> list[float]:
        """The forced rates as each position's acceptance given every earlier one's (r_i / r_(i-1)),
        the form the scheduler's chain draw takes (after a rate of 0 nothing more is reached)."""
        probs, before = [], 1.0
        for rate in self.forced_accept_rates or ():
            probs.append(rate / before if before > 0 else 0.0)
            before = rate
        return probs

    def expected_tokens_per_s(self, batch: int = 1) -> float:
        """Steady-state decode throughput of a full batch of ``batch`` requests (all requests)."""
        return batch * self.expected_accept_length() * 1000.0 / self.step_ms(batch)

    def expected_itl_ms(self, batch: int = 1) -> float:
        """Time between streamed chunks of one request in steady state (one chunk per step)."""
        return self.step_ms(batch)

    # ------------------------------------------------------------ break-even map
    def expected_speedup(self, batch: float = 1) -> float:
        """The speculative config's steady-state output tok/s over plain decoding's, both at a
        running batch of ``batch`` (real-valued): accept length x plain step / verify cycle."""
        if not self.speculative:
            return 1.0
        return self.expected_accept_length() * self.decode_step_ms(batch) / self.verify_cycle_ms(batch)

    def break_even_accept_length(self, batch: float = 1) -> float:
        """The accept length at which speculation's throughput equals plain decoding's at a
        running batch of ``batch``: verify cycle / plain step (where :meth:`expected_speedup`,
        accept length x plain step / verify cycle, is 1)."""
        return self.verify_cycle_ms(batch) / self.decode_step_ms(batch)

    def expected_crossover_batch(self) -> float | None:
        """The highest running batch (real-valued, 1 to max_running_requests) at which
        speculation still pays (expected_speedup >= 1): found on a fine log grid, then by
        bisection. None when it pays at no batch; max_running_requests when it pays at every
        batch the server runs."""
        top = float(max(1, self.max_running_requests))
        grid = [top ** (i / CROSSOVER_GRID) for i in range(CROSSOVER_GRID + 1)]
        paying = [b for b in grid if self.expected_speedup(b) >= 1.0]
        if not paying:
            return None
        low = paying[-1]
        if low >= top:
            return top
        high = grid[grid.index(low) + 1]
        for _ in range(60):  # the bracket shrinks far below any batch that matters
            mid = (low + high) / 2
            low, high = (mid, high) if self.expected_speedup(mid) >= 1.0 else (low, mid)
        return low
