"""Each kind of thing a config can name is listed once, in the registry that owns it, and
the config tree offers exactly what the registry has: backends (harness/servers BACKENDS),
sweep launchers (harness/sweep/launchers.py LAUNCHERS), engines' options blocks."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import yaml

from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.config.schema import ENGINE_BLOCKS, BackendConfig, ServerConfig
from harness.engines import ENGINE_OPTIONS, ENGINES
from harness.servers import BACKENDS, make_server
from harness.servers.base import ServerError
from harness.sweep.launchers import LAUNCHERS, BasicLauncher, launcher_of

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def test_every_backend_the_config_tree_offers_is_registered_and_back():
    offered = {yaml.safe_load(f.read_text())["kind"] for f in (CONF / "backend").glob("*.yaml")}
    assert offered == set(BACKENDS) and BackendConfig.kind in BACKENDS


def test_an_unknown_backend_is_refused_naming_the_registered_ones(tmp_path):
    with pytest.raises(ConfigError, match="attach") as raised:
        compose(["+exp=sim_smoke", "backend.kind=kubernetes"])
    assert all(kind in str(raised.value) for kind in BACKENDS)
    cfg = compose(["+exp=sim_smoke"]).arm("baseline").typed
    cfg = dataclasses.replace(cfg, backend=dataclasses.replace(cfg.backend, kind="kubernetes"))
    with pytest.raises(ServerError, match="backend 'kubernetes' is not available; valid: docker, process, srun, attach"):
        make_server("baseline", cfg, tmp_path / "server.log", session=None)


@pytest.mark.parametrize("preset", sorted(f.stem for f in (CONF / "hydra" / "launcher").glob("*.yaml")))
def test_every_launcher_preset_in_the_tree_is_a_registered_launcher(preset):
    assert launcher_of([f"hydra/launcher={preset}"], CONF) in LAUNCHERS.values()


def test_each_launcher_is_registered_once_under_its_hydra_target():
    assert launcher_of([], CONF) is LAUNCHERS[BasicLauncher.hydra_target]
    assert launcher_of(["hydra/launcher=basic"], CONF).name == "basic"
    assert launcher_of(["hydra/launcher=submitit_local"], CONF).name == "local"
    assert launcher_of(["hydra/launcher=submitit_slurm"], CONF).name == "slurm"
    assert len({launcher.name for launcher in LAUNCHERS.values()}) == len(LAUNCHERS)
    assert all(target == launcher.hydra_target for target, launcher in LAUNCHERS.items())


def test_each_engines_options_are_a_block_of_the_server_schema():
    """The schema (the config's floor) declares the blocks, the engine classes name their types:
    each engine with options has its block, of its type, and the schema has no other."""
    hints = typing.get_type_hints(ServerConfig)
    for name, options in ENGINE_OPTIONS.items():
        assert ENGINES[name].options is options and hints[name] == typing.Optional[options], name
    assert set(ENGINE_BLOCKS) == set(ENGINE_OPTIONS)
