"""Gate defaults are written once, in the schema (harness/config/schema.py, GateConfig):
conf/gate/ repeats none of them, and the composed config's `gate` is the schema's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from harness.run.compose import compose
from harness.config.schema import GateConfig

GATE_DIR = Path(__file__).resolve().parents[2] / "conf" / "gate"


def leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """`{"client_bound": {"min_share": 0.1}}` -> `{"client_bound.min_share": 0.1}`."""
    if isinstance(data, dict) and data:
        found: dict[str, Any] = {}
        for key, value in data.items():
            found.update(leaves(value, f"{prefix}{key}."))
        return found
    return {prefix.rstrip("."): data} if prefix else {}


def repeated_defaults(text: str) -> list[str]:
    """The keys a gate config file sets to the value the schema already gives them."""
    defaults = leaves(OmegaConf.to_container(OmegaConf.structured(GateConfig)))
    return [key for key, value in leaves(yaml.safe_load(text) or {}).items()
            if key in defaults and defaults[key] == value]


def test_the_composed_gate_is_the_schemas_defaults():
    composed = OmegaConf.to_container(compose([]).base.gate)
    assert composed == OmegaConf.to_container(OmegaConf.structured(GateConfig))


def test_conf_gate_default_sets_nothing_the_schema_says():
    assert yaml.safe_load((GATE_DIR / "default.yaml").read_text(encoding="utf-8")) in (None, {})


@pytest.mark.parametrize("path", sorted(GATE_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_no_gate_config_repeats_a_schema_default(path):
    assert repeated_defaults(path.read_text(encoding="utf-8")) == []


def test_a_repeated_default_is_caught_where_a_changed_one_is_not():
    text = "max_failed_requests: 0\nclient_bound:\n  min_share: 0.1\n  loop_lag_ms_p99: 50.0\nmax_cv: 0.2\n"
    assert repeated_defaults(text) == ["max_failed_requests", "client_bound.min_share"]
