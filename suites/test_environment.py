"""Did the configured environment (the NCCL preset + server.env) reach every server
process — main, tokenizer, scheduler, each TP worker? The debugging session this tool comes from
set NCCL tuning variables and never knew whether the workers had them."""

import pytest

from harness.engines import engine_of
from harness.servers import ServerError
from harness.servers.processes import environment_mismatches


def test_configured_environment_reached_every_server_process(arm_run, runner):
    expected = {**arm_run.cfg.nccl.env, **arm_run.cfg.server.env}
    if not expected:
        pytest.skip(f"no NCCL or server environment is configured for arm '{arm_run.name}'")
    try:
        processes = arm_run.server.processes()
    except ServerError as exc:
        pytest.skip(str(exc))
    runner.note_environment(arm_run.name, processes, sorted(expected))
    engine = engine_of(arm_run.arm.typed)
    least = engine.min_processes(arm_run.arm.typed)
    members = arm_run.server.members()
    for member in members:  # each worker of a fleet is a whole server: its processes named by it
        own = processes if len(members) == 1 else [p for p in processes  # a worker's, on any of its nodes
                                                   if p.where == member.name or p.where.startswith(f"{member.name} ")]
        where = "" if len(members) == 1 else f" in {member.name}"
        assert len(own) >= least, (
            f"found {len(own)} server processes{where}, expected at least {least} for {engine.name} at "
            f"tp_size {arm_run.cfg.server.tp_size}: " + "; ".join(p.describe() for p in own))
    problems = environment_mismatches(processes, {k: str(v) for k, v in expected.items()})
    assert not problems, (f"{len(problems)} of {len(processes)} server processes lack the configured environment:\n"
                          + "\n".join(problems))
