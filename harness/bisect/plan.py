"""What a bisect searches, from its command line, checked before any server starts.

    specgate bisect +exp=NAME [k=v ...] KEY=V0,V1,...,Vn [ab.*=...]

One override holds an ordered list (`server.sim.decode_step_ms=4.0,4.05,...,4.6`, an image
tag `build.image=engine:1,engine:2,...`): its first value is the good one, its last the bad
one, and the search is for the first bad value between them. Everything else is both sides'
of every A/B the search runs (harness/ab/: side A the good value, side B the probed one).
Each value is composed and checked here, so a value that does not fit its key is one
sentence before anything starts, as is a list of one value, a repeated value, or none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.ab.plan import ABPlan
from harness.config.compose import ConfigError, Experiment, override_key
from harness.run.compose import compose

AUTO_ROUNDS = "ab.rounds=auto"  # a bisect's A/Bs run until decided unless ab.rounds says otherwise


@dataclass
class BisectPlan:
    common: list[str]  # every A/B's common overrides (the ab.* settings included)
    key: str  # the bisected config key
    values: list[str]  # ordered: the first good, the last bad
    conf_dir: Path
    base: Experiment  # composed at the good value: the record's experiment

    @property
    def good(self) -> str:
        return self.values[0]

    @property
    def bad(self) -> str:
        return self.values[-1]

    def ab_tokens(self, index: int, record_root: Path) -> list[str]:
        """The A/B of value `index` against the good end: side A the good value, side B it."""
        return [*self.common, f"record.root={record_root}", f"a:{self.key}={self.good}",
                f"b:{self.key}={self.values[index]}"]

    def ab_plan(self, index: int, record_root: Path) -> ABPlan:
        return ABPlan.of(self.ab_tokens(index, record_root), self.conf_dir)

    @classmethod
    def of(cls, tokens: list[str], conf_dir: Path) -> "BisectPlan":
        key, values, common = split_list(tokens)
        if not any(override_key(t) == "ab.rounds" for t in common):
            common.append(AUTO_ROUNDS)
        experiments = []
        for value in values:  # each value composed once: a value that does not fit its key stops here
            try:
                experiments.append(compose([*common, f"{key}={value}"], conf_dir))
            except ConfigError as exc:
                raise ConfigError(f"{key}={value}: {exc}") from None
        plan = cls(common, key, values, conf_dir, experiments[0])
        plan.ab_plan(len(values) - 1, Path(experiments[0].base.record.root))  # the ends as an A/B: its checks
        return plan


def split_list(tokens: list[str]) -> tuple[str, list[str], list[str]]:
    """(the bisected key, its ordered values, the other overrides)."""
    listed, common = [], []
    for token in tokens:
        if token.startswith("-"):
            raise ConfigError(f"specgate bisect takes Hydra overrides only ({token} is an option)")
        if token[:2].lower() in ("a:", "b:"):
            raise ConfigError(f"specgate bisect sets side A and side B itself (A the first value, B the probed "
                              f"one); '{token}' would override that: give it without its prefix")
        key, eq, value = token.partition("=")
        if eq and "," in value and not value.lstrip().startswith(("[", "{", "'", '"')):
            listed.append((key, [v.strip() for v in value.split(",")]))  # "+key" kept: each side adds it
        else:
            common.append(token)
    if not listed:
        raise ConfigError("specgate bisect needs one key with an ordered list of values, the first good and the "
                          "last bad, e.g. server.sim.decode_step_ms=4.0,4.1,4.2,4.3")
    if len(listed) > 1:
        raise ConfigError(f"specgate bisect searches one list; {', '.join(k for k, _ in listed)} each give one: "
                          f"keep one, and set the others to one value")
    (key, values), = listed
    if any(not v for v in values):
        raise ConfigError(f"{key}: an empty value in the list ({','.join(values)})")
    if len(set(values)) < len(values):
        repeated = sorted({v for v in values if values.count(v) > 1})
        raise ConfigError(f"{key}: {', '.join(repeated)} listed twice; give each value once, in order")
    if len(values) < 2:
        raise ConfigError(f"{key}: a list of one value has nothing to bisect")
    return key, values, common
