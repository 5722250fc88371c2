"""What a bisect searches, from its command line, checked before any server starts.

    specgate bisect +exp=NAME [k=v ...] KEY=V0,V1,...,Vn [ab.*=...]

One override holds an ordered list (`server.sim.decode_step_ms=4.0,4.05,...,4.6`, an image
tag `build.image=engine:1,engine:2,...`), or a range of commits of a build from a git
repository (`build=git build.repo=PATH build.git_ref=GOOD..BAD`: GOOD and each commit after it
up to BAD, along BAD's first parents; harness/servers/git_source.py): its first value is the
good one, its last the bad one, and the search is for the first bad value between them. Everything else is both sides'
of every A/B the search runs (harness/ab/: side A the good value, side B the probed one).
Each value is composed and checked here, so a value that does not fit its key is one
sentence before anything starts, as is a list of one value, a repeated value, or none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.ab.plan import ABPlan
from harness.config.compose import ConfigError, Experiment, override_key
from harness.run.compose import compose
from harness.servers.git_source import GitSourceError, commits_between

AUTO_ROUNDS = "ab.rounds=auto"  # a bisect's A/Bs run until decided unless ab.rounds says otherwise


@dataclass
class BisectPlan:
    common: list[str]  # every A/B's common overrides (the ab.* settings included)
    key: str  # the bisected config key
    values: list[str]  # ordered: the first good, the last bad
    conf_dir: Path
    base: Experiment  # composed at the good value: the record's experiment
    described: dict[str, str] = field(default_factory=dict)  # value -> what it is (a commit's subject)

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
        described = {}
        if is_range(key, values):
            described = commits_of(key, values[0], common, conf_dir)
            values = list(described)
        experiments = []
        for value in values:  # each value composed once: a value that does not fit its key stops here
            try:
                experiments.append(compose([*common, f"{key}={value}"], conf_dir))
            except ConfigError as exc:
                raise ConfigError(f"{key}={value}: {exc}") from None
        plan = cls(common, key, values, conf_dir, experiments[0], described)
        plan.ab_plan(len(values) - 1, Path(experiments[0].base.record.root))  # the ends as an A/B: its checks
        return plan


GIT_REF = "build.git_ref"
RANGE = re.compile(r"^([^,.\s][^,\s]*?)\.\.([^,.\s][^,\s]*)$")  # GOOD..BAD (git's two-dot range)


def is_range(key: str, values: list[str]) -> bool:
    return override_key(key) == GIT_REF and len(values) == 1 and RANGE.match(values[0]) is not None


def commits_of(key: str, spelled: str, common: list[str], conf_dir: Path) -> dict[str, str]:
    """GOOD..BAD as its commits (short id -> subject), GOOD first, in the repository the
    build names (every arm's build.repo: one repository)."""
    good, bad = RANGE.match(spelled).groups()
    try:
        experiment = compose([*common, f"{key}={good}"], conf_dir)
    except ConfigError as exc:
        raise ConfigError(f"{key}={spelled}: {exc}") from None
    repos = {str(arm.typed.build.repo) for arm in experiment.arms}
    kinds = {str(arm.typed.build.kind) for arm in experiment.arms}
    if kinds != {"git"}:
        raise ConfigError(f"{key}={spelled}: a range of commits is built by build.kind=git (build=git "
                          f"build.repo=PATH), and this experiment's build is {', '.join(sorted(kinds))}")
    if len(repos) != 1:
        raise ConfigError(f"{key}={spelled}: the arms build from different repositories ({', '.join(sorted(repos))}); "
                          f"a range of commits is of one")
    try:
        commits = commits_between(repos.pop(), good, bad)
    except GitSourceError as exc:
        raise ConfigError(f"{key}={spelled}: {exc}") from None
    return dict(commits)


def split_list(tokens: list[str]) -> tuple[str, list[str], list[str]]:
    """(the bisected key, its ordered values, the other overrides); a commit range GOOD..BAD of
    build.git_ref is one value, expanded by the plan."""
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
        elif eq and is_range(key, [value.strip()]):
            listed.append((key, [value.strip()]))
        else:
            common.append(token)
    if not listed:
        raise ConfigError("specgate bisect needs one key with an ordered list of values, the first good and the "
                          "last bad, e.g. server.sim.decode_step_ms=4.0,4.1,4.2,4.3, or a range of commits of a "
                          "git build, build.git_ref=GOOD..BAD")
    if len(listed) > 1:
        raise ConfigError(f"specgate bisect searches one list; {', '.join(k for k, _ in listed)} each give one: "
                          f"keep one, and set the others to one value")
    (key, values), = listed
    if any(not v for v in values):
        raise ConfigError(f"{key}: an empty value in the list ({','.join(values)})")
    if len(set(values)) < len(values):
        repeated = sorted({v for v in values if values.count(v) > 1})
        raise ConfigError(f"{key}: {', '.join(repeated)} listed twice; give each value once, in order")
    if len(values) < 2 and not is_range(key, values):
        raise ConfigError(f"{key}: a list of one value has nothing to bisect")
    return key, values, common
