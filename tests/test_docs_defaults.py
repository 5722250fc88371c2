"""The README and docs/ say what the code does: every default they quote is the config's,
every config key they name is the schema's, every relative link (and its heading) and every
repository path they name exists, and the README stays short enough to read (at most 300
lines).

The convention that makes a quoted default checkable (docs/architecture.md, "Writing the
docs"), in prose outside code blocks:

- a key's default: `` `gate.tolerance` (default `0.02`) ``, the full dotted key in backticks,
  then ``(default `VALUE``` with VALUE as YAML (a unit may follow inside the parentheses).
  It is compared with the config composed from conf/ with no override (what a user gets),
  so it covers the schema's dataclass defaults and conf/*.yaml alike. A mapping entry's
  field names its entry in angle brackets, `` `gate.lossless.<arm>.min_exact_match` ``, and
  is read off the schema's dataclass;
- a table whose first two columns are ``key | default``: each row the same way;
- a group's default option: `` `backend=docker` (default) ``, or a config-tree table's row
  ``| `backend` | `docker` (default), ...``.

A config key followed by "default" and a number in any other form fails, so a default
cannot slip past the check by being written differently.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from harness import PROJECT_ROOT as ROOT
from harness.config.compose import DEFAULT_CONF_DIR, compose_config
from harness.run.compose import REGISTRIES
from harness.config.schema import SpecgateConfig

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the config's sections that hold keys: backend, build, server, ..., gate, slo, capacity
SECTIONS = [f.name for f in dataclasses.fields(SpecgateConfig) if dataclasses.is_dataclass(f.type)
            or f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)]

KEY = r"`([a-z_][\w.<>-]*)`"
QUOTED_DEFAULT = re.compile(KEY + r"\s+\(default\s+`([^`]*)`")
DEFAULTS_TABLE = re.compile(r"^\| key \| default \|.*(?:\n\|.*)*", re.M)
TABLE_ROW = re.compile(r"^\| " + KEY + r" \| `([^`]*)` \|", re.M)
GROUP_DEFAULT = re.compile(r"`(\w+)=(\w+)`\s+\(default\)|^\| `(\w+)` \| `(\w+)` \(default\)", re.M)
LOOSE_DEFAULT = re.compile(r"`(?:%s)\.[\w.<>]+`[^`]{0,25}?\bdefaults?\b(?: to| is)?:?\s*\**[-\d]" % "|".join(SECTIONS))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"`((?:harness|conf|suites|tests|benchmarks|scripts|containers|datasets|docs)/[\w./-]*)`")


def prose(page: Path) -> str:
    """The page's text with its code blocks blanked, line numbers kept."""
    lines, in_code = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        fence = line.lstrip().startswith("```")
        lines.append("" if in_code or fence else line)
        in_code ^= fence
    return "\n".join(lines)


def found(pattern: re.Pattern, pages=PAGES):
    """(page, "page:line", match) of every match in the prose of the pages; a match may span lines."""
    for page in pages:
        text = prose(page)
        for match in pattern.finditer(text):
            yield page, f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}", match


def quoted_defaults() -> list[tuple[str, str, str]]:
    """(place, key, quoted value) of every default quoted in prose or in a "key | default" table."""
    quoted = [(place, m.group(1), m.group(2)) for _, place, m in found(QUOTED_DEFAULT)]
    for page, place, table in found(DEFAULTS_TABLE):
        first = int(place.rsplit(":", 1)[1])
        quoted += [(f"{page.relative_to(ROOT)}:{first + table.group(0).count(chr(10), 0, row.start())}",
                    row.group(1), row.group(2)) for row in TABLE_ROW.finditer(table.group(0))]
    return quoted


def schema_default(path: list[str]):
    """The schema's default at the dotted `path`; KeyError when the schema has no such key. A
    mapping's entry is any segment (`<arm>`, `eagle3`); below it, its dataclass's fields."""
    node, value = SpecgateConfig, None
    segments = iter(path)
    for part in segments:
        if node is None:
            raise KeyError(".".join(path))  # below a value
        if part.startswith("<"):
            return None  # `slo.<metric>.<statistic>`: any field from here on
        hints = typing.get_type_hints(node)
        if part not in hints:
            raise KeyError(".".join(path))
        field = next(f for f in dataclasses.fields(node) if f.name == part)
        value = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        kind, node = hints[part], None
        if typing.get_origin(kind) is typing.Union:  # Optional[X]
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if kind is typing.Any:
            return value  # free-form below
        if typing.get_origin(kind) in (dict, typing.Dict):  # Dict[str, X]: the next segment is an entry
            if next(segments, None) is None:
                return value
            kind, value = typing.get_args(kind)[1], None
        if dataclasses.is_dataclass(kind):
            node = kind
    return value


def config_default(key: str, cfg):
    """The default a user gets for `key`; KeyError when the config has no such key."""
    if "<" in key:
        return schema_default(key.split("."))
    value = OmegaConf.select(cfg, key, default=KeyError)
    if value is KeyError:
        raise KeyError(key)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = [line.lstrip("#").strip() for line in prose(page).splitlines() if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.fixture(scope="module")
def default_config():
    return compose_config([], DEFAULT_CONF_DIR, REGISTRIES)


def test_the_pages_quote_defaults_in_the_checkable_form():
    assert len(quoted_defaults()) >= 60, "the convention's patterns no longer find the quoted defaults"


def test_every_quoted_default_is_the_configs(default_config):
    cfg, _ = default_config
    wrong = []
    for place, key, text in quoted_defaults():
        try:
            actual = config_default(key, cfg)
        except KeyError:
            wrong.append(f"{place}: `{key}` is no key of the config")
            continue
        if yaml.safe_load(text) != actual:
            wrong.append(f"{place}: `{key}` (default `{text}`), but the config's default is {actual!r}")
    assert not wrong, "\n".join(wrong)


def test_every_quoted_group_default_is_the_configs(default_config):
    _, choices = default_config
    quoted = [(place, m.group(1) or m.group(3), m.group(2) or m.group(4)) for _, place, m in found(GROUP_DEFAULT)]
    assert len(quoted) >= 8, "the pattern no longer finds the config tree's default options"
    wrong = [f"{place}: {group}={option} is quoted as the default, but conf/config.yaml picks {choices.get(group)!r}"
             for place, group, option in quoted if choices.get(group) != option]
    assert not wrong, "\n".join(wrong)


def test_no_default_is_quoted_outside_the_convention():
    loose = [f"{place}: {m.group(0)!r}: write it as `key` (default `value`)" for _, place, m in found(LOOSE_DEFAULT)]
    assert not loose, "\n".join(loose)


def test_every_config_key_named_exists():
    """A key in backticks (`workload.max_tokens`, `gate.min_speedup.eagle4.ratio=1.3`) is the schema's."""
    named = re.compile(r"`((?:%s)\.[\w.<>]+?)(?:=[^`]*)?`" % "|".join(SECTIONS))
    files = re.compile(r"\.(?:py|json|jsonl|log|png|csv|md|yaml|html)$")
    unknown = []
    for _, place, m in found(named):
        if files.search(m.group(1)):
            continue  # slo.py, capacity.json, server.log: files, not keys
        try:
            schema_default(m.group(1).split("."))
        except KeyError:
            unknown.append(f"{place}: `{m.group(1)}`")
    assert not unknown, "no such key in harness/config/schema.py:\n" + "\n".join(unknown)


def test_every_relative_link_points_at_a_file_and_heading():
    broken = []
    for page, place, match in found(LINK):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.exists():
            broken.append(f"{place}: {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{place}: {target}: no heading '#{anchor}' in {path.name}")
    assert not broken, "\n".join(broken)


def test_every_repository_path_named_exists():
    missing = [f"{place}: {m.group(1)}" for _, place, m in found(REPO_PATH) if not (ROOT / m.group(1)).exists()]
    assert not missing, "no such file or folder:\n" + "\n".join(missing)


def test_the_readme_stays_a_page_a_newcomer_reads():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= 300, f"README.md has {lines} lines; depth belongs in a docs/ page, linked from its table"


def test_readme_names_every_experiment_and_drafter_of_the_config_tree():
    readme = (ROOT / "README.md").read_text()
    for group in ("exp", "drafter"):
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{group}` |"))
        named = set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[2]))
        options = {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}
        assert options <= named, f"README's {group} row lacks {sorted(options - named)}"
