"""What an A/B compares, from its command line, checked before any server starts.

    specgate ab +exp=NAME [k=v ...] [a:k=v ...] [b:k=v ...] [ab.rounds=3 | ab.rounds=auto] [ab.keep_up=true]

The overrides without a prefix are both sides'; `a:` and `b:` ones are that side's alone and
win over a common one on the same key (`b:build=sglang_patched`, `a:nccl=default b:nccl=pcie_tuned`).
Both sides must measure the same thing: the same arms, model and workload (what
harness/gates/baseline_match.py compares); only how it is served may differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from harness.config.compose import Arm, ConfigError, Experiment, override_key
from harness.run.compose import compose
from harness.gates.baseline_match import differences
from harness.run.preflight import preflight

SIDES = ("A", "B")
PREFIXES = {"a:": "A", "b:": "B"}
ORDERS = ("abba", "alternate")


@dataclass
class ABPlan:
    common: list[str]  # both sides' overrides, in command-line order
    own: dict[str, list[str]]  # side -> its own overrides
    sides: dict[str, Experiment]  # side -> its composed experiment
    rounds: int  # the rounds planned: ab.rounds, or with ab.rounds=auto the most it may run (ab.max_rounds)
    order: str  # abba | alternate
    keep_up: bool  # both sides' servers up for every round (when they fit), else fresh ones per round
    sequential: bool = False  # ab.rounds=auto: judged after every round from the third, stopped once decided

    @property
    def rounds_words(self) -> str:
        return f"up to {self.rounds} rounds, until decided" if self.sequential else f"{self.rounds} rounds"

    @property
    def base(self) -> Experiment:
        return self.sides["A"]

    @property
    def arm_names(self) -> list[str]:
        """The arms in the order a run measures them: the plain-decoding arm first."""
        plain = self.base.plain_arm
        return sorted(self.base.arm_names, key=lambda name: name != plain)

    def arm(self, side: str, name: str) -> Arm:
        return self.sides[side].arm(name)

    def order_of(self, round_index: int) -> tuple[str, str]:
        """Which side goes first in round `round_index` (0-based): ABBA turns the order every
        round, so a drift that grows through the job weighs on both sides alike; `alternate`
        keeps A first."""
        if self.order == "abba" and round_index % 2 == 1:
            return "B", "A"
        return "A", "B"

    def describe(self, side: str) -> str:
        """The side's own overrides as they may be shown: secrets as fingerprints."""
        experiment = self.sides[side]
        shown = experiment.shown(self.own[side])
        return " ".join(shown) or "the common config"

    @classmethod
    def of(cls, tokens: list[str], conf_dir: Path) -> "ABPlan":
        common, own = split_sides(tokens)
        sides = {side: compose_side(side, common, own[side], conf_dir) for side in SIDES}
        settings = sides["A"].base.ab
        for side in SIDES:
            if sides[side].base.ab != settings:
                raise ConfigError(f"ab.* differs between the sides ({side} sets its own); set ab.* for both, "
                                  f"without a: or b:")
        sequential = check_settings(settings)
        check_same_measurement(sides)
        rounds = int(settings.max_rounds) if sequential else int(settings.rounds)
        return cls(common, own, sides, rounds, str(settings.order), bool(settings.keep_up), sequential)


def split_sides(tokens: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    common, own = [], {side: [] for side in SIDES}
    for token in tokens:
        prefix = token[:2].lower()
        if prefix in PREFIXES:
            if not token[2:] or "=" not in token[2:]:
                raise ConfigError(f"'{token}' gives side {PREFIXES[prefix]} no override; write it as {prefix}group.option=value")
            own[PREFIXES[prefix]].append(token[2:])
        elif token.startswith("-"):
            raise ConfigError(f"specgate ab takes Hydra overrides only ({token} is an option); "
                              f"the suites' options do not apply to an A/B")
        else:
            common.append(token)
    if not own["A"] and not own["B"]:
        raise ConfigError("an A/B needs what differs: give side A or B its own overrides, e.g. "
                          "b:server.sim.decode_step_ms=4.4 or a:build.git_ref=main")
    return common, own


def compose_side(side: str, common: list[str], own: list[str], conf_dir: Path) -> Experiment:
    """The side's experiment: the common overrides, its own winning on the same key."""
    mine = {override_key(o) for o in own}
    overrides = [o for o in common if override_key(o) not in mine] + own
    try:
        experiment = compose(overrides, conf_dir)
        preflight(experiment)
    except ConfigError as exc:
        raise ConfigError(f"side {side}: {exc}") from None
    return experiment


def check_settings(settings) -> bool:
    """ab.rounds is a number (its bounds are the schema's, ABConfig: at least 2, as a paired
    change's spread comes from the rounds) or `auto`; True for auto (a sequential A/B)."""
    if settings.order not in ORDERS:
        raise ConfigError(f"ab.order is '{settings.order}'; one of {', '.join(ORDERS)}")
    rounds = settings.rounds
    if isinstance(rounds, str) and rounds.strip().lower() == "auto":
        return True
    if isinstance(rounds, bool) or not isinstance(rounds, int):
        raise ConfigError(f"ab.rounds is '{rounds}'; a whole number of rounds (at least 2), or auto to run "
                          f"rounds until every verdict is decided (at most ab.max_rounds={settings.max_rounds})")
    return False


def check_same_measurement(sides: dict[str, Experiment]) -> None:
    """Both sides' arms measure the same model and workload (a difference in how it is served
    is the point of the A/B; a difference in what is measured would make any change meaningless)."""
    a, b = sides["A"], sides["B"]
    if a.arm_names != b.arm_names:
        raise ConfigError(f"the sides have different arms (A: {', '.join(a.arm_names)}; B: {', '.join(b.arm_names)}); "
                          f"an A/B compares each arm with itself")
    for name in a.arm_names:
        diff = [d.replace(" there, ", " on A, ").replace(" here", " on B")
                for d in differences(plain(b.arm(name)), plain(a.arm(name))) if not d.startswith("server.engine")]
        if diff:
            raise ConfigError(f"arm '{name}' measures something else on side B than on side A ({'; '.join(diff)}); "
                              f"an A/B compares how one workload is served, so give both sides the same model "
                              f"and workload")


def plain(arm: Arm) -> dict:
    return OmegaConf.to_container(arm.cfg, resolve=True)

