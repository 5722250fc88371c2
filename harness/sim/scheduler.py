"""The scheduler process (TP rank 0) and the other TP worker processes.

The scheduler runs SGLang-style continuous batching with simulated step times:
every iteration is either a *prefill* step that admits waiting requests and emits
their first token, or a *decode* step over all running requests (one token each, or
one speculative cycle each).  Steps are timed against absolute deadlines so that the
average step length matches the timing model to well under 1%.

Each step's outputs for all requests go to the detokenizer as ONE message:
``("out", t_end, num_running, num_queue, verify_ct_total, verify_tokens_total, items)``
with ``items = [(rid, start_pos, n_tokens, plan_or_None, finish_or_None, spec_or_None, flipped)]``
(``plan`` only on a request's first output; ``spec`` = ``(verify_ct, correct_drafts,
histogram)`` only when it finishes; ``flipped``: the positions whose accepted draft a lossy
verifier let through wrong, ``--sim-lossy-rate``, usually none).

Which tokens come out never depends on speculation: a cycle only decides how many of the
request's next positions are emitted at once (harness/sim/tokens.py renders them). Forced
acceptance (harness/sim/model.py) is the exception, as in SGLang: a cycle's length is then set,
not drawn from the drafts (one length per step for the whole batch by SGLANG_SIMULATE_ACC_LEN,
or per request by --sim-forced-accept-rates), and every token it yields is the filler, so a
request's plan is made ``forced`` (no EOS: it runs to max_new_tokens).
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from harness.sim.drift import Drift
from harness.sim.model import SimModel
from harness.sim.prefix_cache import PrefixCache
from harness.sim.procs import child_setup, fine_timer_slack
from harness.sim.tokens import EOS_TOKEN_ID, OutputPlan, lossy_draw

# If the loop falls behind by more than this, re-anchor instead of bursting steps.
_MAX_LAG_S = 0.25


@dataclass
class SimRequest:
    rid: int
    prompt_tokens: int
    max_new_tokens: int
    natural_len: int  # tokens until EOS inclusive, -1 = never
    plan: OutputPlan
    rng: random.Random
    generated: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    accept_probs: tuple[float, ...] = ()  # this request's content's acceptance; () = the model's default
    hashes: tuple[int, ...] = ()  # its prompt's page hashes (harness/sim/prefix_cache.py); () = never cached
    prefilled: bool = False  # its KV came from a prefill server (harness/sim/disagg.py): nothing to compute

    def finish_after(self, n_new: int) -> Any:
        """Finish reason (SGLang's JSON form) if emitting ``n_new`` more tokens ends it."""
        total = self.generated + n_new
        # SGLang checks the length limit before the stop token (Req.check_finished).
        if total >= self.max_new_tokens:
            return {"type": "length", "length": self.max_new_tokens}
        if 0 <= self.natural_len <= total:
            return {"type": "stop", "matched": EOS_TOKEN_ID}
        return None

    def remaining(self) -> int:
        left = self.max_new_tokens - self.generated
        if self.natural_len >= 0:
            left = min(left, self.natural_len - self.generated)
        return left


def _sleep_until(deadline: float) -> None:
    """Sleep, never spin. A step's lateness (time.sleep's overshoot, tens of microseconds at a
    timer slack of 1 us, more on a busy machine) does not accumulate: the next step starts at
    this deadline, not when the sleep ended (Scheduler.run). Spinning the last 1.2 ms of each
    step took 70 % of a core per busy simulator for the same timeline (3.42 s for 4000 tokens
    either way), and on a 2-core machine running several, that core is the other servers'."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class Scheduler:
    def __init__(self, model: SimModel, inbox: Connection, outbox: Connection, tp_conns: list[Connection]):
        self.model = model
        self.inbox = inbox
        self.outbox = outbox
        self.tp_conns = tp_conns
        self.waiting: deque[SimRequest] = deque()
        self.running: dict[int, SimRequest] = {}
        self.arrivals = 0
        self.verify_ct_total = 0
        self.verify_tokens_total = 0
        self.step_id = 0
        self.stop = False
        self.drift = Drift(model.drift)  # how much slower or faster than the model each step runs
        self.cache = PrefixCache(model.page_size, model.prefix_cache)
        self.prefilled: list[tuple[int, int, int]] = []  # the last prefill step's (rid, prompt, cached tokens)
        # Forced acceptance: the batch-wide length's own draws (one per step, seeded like the rest),
        # and per-position rates as the chain draw's conditional probabilities
        self.forced_rng = random.Random(f"forced/{model.seed}")
        self.forced_probs = model.forced_conditional_probs() if model.forced_accept_rates is not None else None

    # ----------------------------------------------------------------- inbox
    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "add":
            _, rid, prompt_tokens, max_new, natural_len, plan, accept_probs, hashes, prefilled = msg
            # Per-request RNG seeded from (seed, arrival order): draws do not depend
            # on how requests happen to be batched.
            rng = random.Random((self.model.seed << 32) ^ self.arrivals)
            self.arrivals += 1
            plan = OutputPlan(*plan)
            if self.model.forced:  # its tokens after the first are fillers, never the EOS (tokens.py)
                plan, natural_len = plan._replace(forced=True), -1
            req = SimRequest(rid, prompt_tokens, max_new, natural_len, plan, rng,
                             accept_probs=tuple(accept_probs or ()), hashes=tuple(hashes), prefilled=prefilled)
            req.histogram = [0] * (self.model.num_steps + 1)
            self.waiting.append(req)
        elif kind == "abort":
            rid = msg[1]
            self.running.pop(rid, None)
            self.waiting = deque(r for r in self.waiting if r.rid != rid)
            # Refresh the main process's running/queue gauges even if nothing else runs.
            self._send_out([])
        elif kind == "flush":
            self.cache.reset()
        elif kind == "shutdown":
            self.stop = True

    def _drain_inbox(self, block: bool) -> None:
        if block and not self.inbox.poll(0.2):
            return
        while self.inbox.poll():
            self._handle(self.inbox.recv())

    def _send_out(self, items: list[tuple]) -> None:
        self.outbox.send(
            ("out", time.time(), len(self.running), len(self.waiting), self.verify_ct_total, self.verify_tokens_total, items)
        )

    # ----------------------------------------------------------------- steps
    def _prefill_step(self) -> tuple[float, list[tuple]]:
        room = max(0, self.model.max_running_requests - len(self.running))
        admitted = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        # Matched before any of this batch is inserted: a request shares what earlier steps prefilled.
        # One whose KV a prefill server sent (disaggregation) is neither looked up nor computed:
        # its step is SGLang's prebuilt batch, which emits the first token the prefill made.
        computed = [r for r in admitted if not r.prefilled]
        cached = [self.cache.match(r.hashes, r.prompt_tokens) for r in computed]
        for r in computed:
            self.cache.insert(r.hashes)
        self.prefilled = [(r.rid, r.prompt_tokens, c) for r, c in zip(computed, cached)]
        n_tokens = sum(r.prompt_tokens for r in computed) - sum(cached)  # a cached prefix costs no prefill
        duration = self.model.prefill_ms(n_tokens, len(admitted)) * self.drift.factor() / 1000.0
        items = []
        for r in admitted:
            n = 1 if r.remaining() > 0 else 0
            finish = r.finish_after(n)
            items.append((r.rid, 0, n, tuple(r.plan), finish, None, ()))
            r.generated += n
            if finish is None:
                self.running[r.rid] = r
        return duration, items

    def _decode_step(self) -> tuple[float, list[tuple]]:
        m = self.model
        batch = len(self.running)
        items = []
        done = []
        if m.speculative:
            duration = m.verify_cycle_ms(batch) * self.drift.factor() / 1000.0
            # SGLang's simulated acceptance: one length for every request of this step
            batch_n = m.draw_forced_length(self.forced_rng) if m.forced_accept_length is not None else None
            for r in self.running.values():
                accepted = self._accepted(r) if batch_n is None else batch_n - 1
                n = min(1 + accepted, r.remaining())
                flipped = () if m.forced else self._lossy_flips(r, min(accepted, n))  # forced: fillers anyway
                r.verify_ct += 1
                r.correct_drafts += n - 1
                r.histogram[n - 1] += 1
                self.verify_ct_total += 1
                self.verify_tokens_total += n
                finish = r.finish_after(n)
                spec = (r.verify_ct, r.correct_drafts, r.histogram) if finish is not None else None
                items.append((r.rid, r.generated, n, None, finish, spec, flipped))
                r.generated += n
                if finish is not None:
                    done.append(r.rid)
        else:
            duration = m.decode_step_ms(batch) * self.drift.factor() / 1000.0
            for r in self.running.values():
                finish = r.finish_after(1)
                items.append((r.rid, r.generated, 1, None, finish, None, ()))
                r.generated += 1
                if finish is not None:
                    done.append(r.rid)
        for rid in done:
            del self.running[rid]
        return duration, items

    def _accepted(self, r: SimRequest) -> int:
        """Drafts one cycle of ``r`` accepts: each position with its probability given every
        earlier one's -- the forced rates', else its content's, else the model's."""
        rand = r.rng.random
        accepted = 0
        for p in self.forced_probs if self.forced_probs is not None else (r.accept_probs or self.model.accept_probs):
            if rand() >= p:
                break
            accepted += 1
        return accepted

    def _lossy_flips(self, r: SimRequest, drafted: int) -> tuple[int, ...]:
        """Which of this cycle's ``drafted`` accepted draft tokens (the request's next
        positions) a lossy verifier lets through wrong: drawn per position from the seed and
        the prompt, so every run flips the same ones. Never the EOS: it ends the request."""
        rate = self.model.lossy_rate
        if not rate:
            return ()
        eos = r.natural_len - 1
        return tuple(i for i in range(r.generated, r.generated + drafted)
                     if i != eos and lossy_draw(self.model.seed, r.plan, i) < rate)

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        self.outbox.send(("ready", os.getpid()))
        deadline: float | None = None
        while not self.stop:
            idle = not self.waiting and not self.running
            if idle:
                # The next request starts a fresh timeline; never "catch up" on idle time.
                deadline = None
            self._drain_inbox(block=idle)
            if self.stop:
                break
            if not self.waiting and not self.running:
                continue
            now = time.perf_counter()
            # Back-to-back steps start at the previous deadline (absolute timing);
            # after idling or a large lag, start now.
            start = now if deadline is None or now - deadline > _MAX_LAG_S else deadline
            if self.waiting and len(self.running) < self.model.max_running_requests:
                duration, items = self._prefill_step()
                prefill_started = start
            else:
                duration, items = self._decode_step()
            self.step_id += 1
            for c in self.tp_conns:
                c.send(("step", self.step_id))
            deadline = start + duration
            _sleep_until(deadline)
            if self.prefilled:  # before the step's outputs: a request that ends here has its count
                self.outbox.send(("prefill", self.prefilled, prefill_started))
                self.prefilled = []
            self._send_out(items)
        for c in self.tp_conns:
            try:
                c.send(("shutdown",))
            except OSError:
                pass


def scheduler_main(model: SimModel, inbox: Connection, outbox: Connection, tp_conns: list[Connection], parent_pid: int) -> None:
    child_setup("sglang::sched_TP0", parent_pid)
    fine_timer_slack()
    Scheduler(model, inbox, outbox, tp_conns).run()


def tp_worker_main(rank: int, conn: Connection, parent_pid: int) -> None:
    """TP ranks > 0: follow the scheduler's steps (nothing to compute in a simulator)."""
    child_setup(f"sglang::tp_TP{rank}", parent_pid)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "shutdown":
            return
