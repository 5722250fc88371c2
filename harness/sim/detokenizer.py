"""The detokenizer process: turns the scheduler's token positions into text.

It keeps each request's output plan (sent with its first output) and forwards
every step as ONE message to the main process:
``("out", t_end, num_running, num_queue, verify_ct_total, verify_tokens_total,
[(rid, text_delta, ids_delta, finish, spec), ...])``. Positions the scheduler marks as
flipped (a lossy speculation) are rendered as the runner-up token.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

from harness.sim.procs import child_setup
from harness.sim.tokens import OutputPlan, render


def detokenizer_main(inbox: Connection, outbox: Connection, parent_pid: int) -> None:
    child_setup("sglang::detoken", parent_pid)
    plans: dict[int, OutputPlan] = {}
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError):
            return
        if msg[0] != "out":
            outbox.send(msg)  # "ready" and other control messages pass through
            continue
        _, t_end, n_run, n_queue, vct, vtok, items = msg
        out = []
        for rid, start, n, plan, finish, spec, flipped in items:
            if plan is not None:
                p = OutputPlan(*plan)
                plans[rid] = p
            else:
                p = plans.get(rid)
                if p is None:
                    continue
            text, ids = render(p, start, n, flipped)
            if finish is not None:
                plans.pop(rid, None)
            out.append((rid, text, ids, finish, spec))
        outbox.send(("out", t_end, n_run, n_queue, vct, vtok, out))
