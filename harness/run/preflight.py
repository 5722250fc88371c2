"""What must hold before any server starts, for every driver (the pytest plugin, `specgate
sweep`, `specgate capacity`): the machine has what the experiment needs (a GPU where one is
needed, the interpreter a build names), each drafter fits its target, and gate.baseline resolves
to a Reference (harness/run/reference.py) that is readable and measured the same thing.

:func:`check_experiment` is every check a run makes once its experiment is composed, in one
call: `pytest suites/` (`specgate run`) and `specgate show` both make it, so `show`, the
"check my config" command, refuses exactly what `run` refuses, in the same sentence.

Each problem is a :class:`ConfigError` with one sentence; the entry point decides how to say
it (pytest's usage error, the CLI's exit status 4). No pytest here.
"""

from __future__ import annotations

import os
import sys

from harness.config.compose import ConfigError, Experiment, remote_engine
from harness.engines import engine_of
from harness.run.drafter_fit import DrafterMismatch, check_drafter_fit
from harness.run.reference import Reference, check_comparisons, resolve_reference
from harness.telemetry.driver import nvidia_driver_status


def check_experiment(experiment: Experiment, here: bool = True) -> Reference:
    """Every check a run makes before any server starts, once its experiment is composed (which
    checked every key and number): gate.compare's comparisons, gate.baseline resolved to its
    Reference (harness/run/reference.py: a run, a calibration or a history, read and checked to
    have measured the same thing), then this machine (preflight; not when the run is to start
    elsewhere, ``here`` False: a cluster node checks itself). A ConfigError (one sentence) for
    the first that fails; the Reference the run is judged against otherwise."""
    if experiment.base.gate.compare:  # a malformed comparison is a mistake with or without a reference
        check_comparisons(experiment)
    reference = resolve_reference(experiment)
    if here:
        preflight(experiment)
    return reference


def preflight(experiment: Experiment) -> None:
    """What this machine must have before any server starts: a GPU where one is needed, a
    drafter that fits its target, the interpreter a build names. One sentence each."""
    require_gpu_if_needed(experiment)
    for arm in experiment.arms:
        try:
            if not checkpoints_elsewhere(arm):
                check_drafter_fit(arm.cfg)
        except DrafterMismatch as exc:
            raise ConfigError(f"arm '{arm.name}': {exc}") from None
        python = arm.cfg.build.python
        needs_python = arm.cfg.backend.kind == "process" or arm.cfg.build.kind == "host_venv"  # docker mounts its venv
        if needs_python and python and not os.path.exists(python):
            raise ConfigError(f"arm '{arm.name}': build.python {python} does not exist; "
                              f"`make install` sets up the venvs the project's builds use")


def checkpoints_elsewhere(arm) -> bool:
    """On a remote engine the checkpoints are that machine's: the drafter-fit check reads
    them only where this machine sees them too (a shared filesystem), and says when not."""
    cfg, remote = arm.cfg, remote_engine(arm.cfg)
    if remote is None or not cfg.drafter.algorithm or not engine_of(cfg).checks_drafter_fit:
        return False
    if all(os.path.exists(p) for p in (cfg.server.model_path, cfg.drafter.model_path) if p):
        return False
    print(f"specgate: arm '{arm.name}': the checkpoints are on {remote}, not on this machine: the drafter-fit "
          f"check is left to the server there", file=sys.stderr)
    return True


def require_gpu_if_needed(experiment: Experiment) -> None:
    # an attached server or a remote engine has its GPUs on another machine
    needing = [a for a in experiment.arms
               if a.cfg.server.requires_gpu and a.cfg.backend.kind != "attach" and not remote_engine(a.cfg)]
    if not needing:
        return
    present, why = nvidia_driver_status()
    if not present:
        server = needing[0].cfg.server.name
        raise ConfigError(
            f"experiment '{experiment.name}' needs an NVIDIA GPU machine (server '{server}' has "
            f"requires_gpu: true) but this machine has no NVIDIA driver ({why}); run it on the GPU box, "
            f"or use backend=attach backend.url=... against a running server")
