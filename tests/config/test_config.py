"""Composition of the config tree: every experiment and arm composes; mistakes stop with
one sentence naming the key and the valid choices."""

from pathlib import Path

import re

import pytest

from harness.config.compose import ConfigError, list_experiments, merge_overrides, override_key
from harness.run.compose import compose
from tests.support.runs import specgate

CONF = Path(__file__).resolve().parents[2] / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "exp").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_and_arm_composes(name):
    experiment = compose([f"+exp={name}"])
    assert experiment.name == name
    assert experiment.description, f"exp/{name}.yaml needs a one-line description"
    assert len(experiment.arms) >= 1
    for arm in experiment.arms:
        assert arm.cfg.workload.max_tokens >= 1


def test_without_exp_the_composed_config_is_one_default_arm():
    experiment = compose(["backend=attach", "backend.url=http://127.0.0.1:30000", "workload=count_to_100"])
    assert experiment.arm_names == ["default"]
    cfg = experiment.arms[0].cfg
    assert cfg.backend.kind == "attach" and cfg.backend.url == "http://127.0.0.1:30000"
    assert cfg.workload.prompt == "Count from 1 to 100" and cfg.workload.max_tokens == 500


def test_arms_differ_only_by_their_overrides():
    experiment = compose(["+exp=sim_smoke"])
    baseline, eagle3 = experiment.arm("baseline"), experiment.arm("eagle3")
    assert baseline.cfg.drafter.algorithm is None
    assert eagle3.cfg.drafter.algorithm == "EAGLE3"
    assert (eagle3.cfg.drafter.num_steps, eagle3.cfg.drafter.eagle_topk, eagle3.cfg.drafter.num_draft_tokens) == (2, 1, 3)
    assert baseline.cfg.server == eagle3.cfg.server and baseline.cfg.workload == eagle3.cfg.workload
    assert eagle3.choices["drafter"] == "eagle3_k25" and baseline.choices["drafter"] == "none"


def test_command_line_overrides_apply_to_every_arm():
    experiment = compose(["+exp=sim_smoke", "workload.max_tokens=64", "workload=chat_short"])
    for arm in experiment.arms:
        assert arm.cfg.workload.name == "chat_short"
        assert arm.cfg.workload.max_tokens == 64


def test_command_line_wins_over_an_arm_on_the_same_key():
    experiment = compose(["+exp=sim_smoke", "drafter=none"])
    assert all(arm.cfg.drafter.algorithm is None for arm in experiment.arms)


def test_merge_overrides_keeps_arm_overrides_the_user_did_not_touch():
    assert merge_overrides(["drafter=eagle3_k25", "server.tp_size=2"], ["+server.tp_size=4"]) == [
        "drafter=eagle3_k25", "+server.tp_size=4"]
    assert override_key("++a.b=1") == "a.b" and override_key("~a") == "a"


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["+exp=sim_smoke", "workload.max_tokns=1"], ["workload.max_tokns", "max_tokens", "valid keys"]),
        (["drafter=nope"], ["drafter=nope", "eagle3_k25", "none"]),
        (["+exp=nope"], ["exp=nope", "sim_smoke", "eagle_k2_sim"]),
        (["workload.max_tokens=abc"], ["workload.max_tokens", "abc", "integer"]),
        (["workload.concurrency=0"], ["workload.concurrency", ">= 1"]),
        (["backend=attach"], ["backend.url"]),
        (["backend=attach", "backend.url=localhost:1"], ["not an http"]),
        (["backend=kubernetes"], ["backend=kubernetes", "attach", "docker", "process"]),
        (["telemetry=perf"], ["telemetry=perf", "nvml", "off", "sim", "smi"]),
        (["+exp=sim_smoke", "plain_arm=nobody"], ["plain_arm", "nobody", "baseline"]),
        (["+exp=sim_smoke", "+gate.min_output_tok_s.ghost=1"], ["ghost", "not an arm"]),
        (["+exp=sim_smoke", "gate.min_speedup.eagle3.ratio=fast"], ["ratio", "fast"]),
        (["workload.max_tokens=="], ["cannot parse"]),
    ],
)
def test_mistakes_stop_with_one_sentence_naming_the_key(overrides, expected):
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_list_experiments_has_descriptions():
    experiments = list_experiments(CONF)
    assert {"sim_smoke", "eagle_k2_sim", "eagle_k2"} <= experiments.keys()
    assert all(experiments.values())


@pytest.mark.parametrize("override, fragment", [
    ("+workload.max_tokns=5", "workload.max_tokns: no such key in 'workload'"),
    ("+gate.min_foo_bar=3", "gate.min_foo_bar: no such key in 'gate'"),
    ("+foo=1", "foo: no such key in the top level"),
    ("+workload.max_tokens.deeper=1", "workload.max_tokens.deeper"),
])
def test_plus_adds_only_keys_the_schema_knows(override, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)) as info:
        compose(["+exp=sim_smoke", override])
    assert "`+` adds only keys the schema knows" in str(info.value)


def test_plus_still_adds_entries_to_mappings_and_groups():
    arm = compose(["+exp=sim_smoke", "+server.env.HF_HOME=/tmp/hf", "+gate.max_itl_ms.baseline.p99=50"]).arm("eagle3")
    assert arm.cfg.server.env.HF_HOME == "/tmp/hf"


def test_plus_adds_a_new_entry_to_a_mapping_of_schema_types():
    """Hydra adds `+gate.min_capacity.eagle3.at_least=2` as an empty mapping first, which the
    entry's type refuses; specgate merges such entries whole, one field or all at once. (The
    entry must still make sense to its gate, validated at compose time: a ratio alone has no arm
    to compare with.)"""
    base = compose(["+exp=sim_smoke", "+gate.min_capacity.eagle3.at_least=2",
                    "+sweep_gate.min_speedup_through.eagle3={concurrency: 16, ratio: 1.1}",
                    "+gate.min_speedup.baseline={over: eagle3, ratio: 0.5}"]).base
    entry = base.gate.min_capacity.eagle3
    assert (entry.at_least, entry.ratio, entry.over) == (2.0, 1.0, None)
    assert dict(base.sweep_gate.min_speedup_through.eagle3) == {"concurrency": 16, "ratio": 1.1}
    assert base.gate.min_speedup.baseline.over == "eagle3"
    with pytest.raises(ConfigError, match=re.escape("gate.min_capacity.eagle3.rati: no such key")):
        compose(["+exp=sim_smoke", "+gate.min_capacity.eagle3.rati=2"])
    with pytest.raises(ConfigError, match=re.escape("'abc' is not a valid float")):
        compose(["+exp=sim_smoke", "+gate.min_capacity.eagle3.ratio=abc"])


@pytest.mark.parametrize("key", ["plain_arm", "workload.max_tokens", "server.env", "gate.min_speedup"])
def test_tilde_cannot_delete_a_key_every_config_has(key):
    """Deleting a schema key would fail later, in a traceback (`~plain_arm` did)."""
    with pytest.raises(ConfigError, match=re.escape(f"~{key} would delete '{key}', which every config has")):
        compose(["+exp=sim_smoke", f"~{key}"])


@pytest.mark.parametrize("key, advice", [("gate.min_speedup", "delete its entries instead (e.g. ~gate.min_speedup.eagle3)"),
                                         ("workload.max_tokens", "set it instead (e.g. workload.max_tokens=null")])
def test_the_refusal_of_a_deletion_gives_advice_that_works(key, advice):
    """A mapping's way off is deleting its entries (its `{}` is refused as judging nothing)."""
    with pytest.raises(ConfigError, match=re.escape(advice)):
        compose(["+exp=sim_smoke", f"~{key}"])
    if key == "gate.min_speedup":
        assert "eagle3" not in compose(["+exp=sim_smoke", "~gate.min_speedup.eagle3"]).base.gate.min_speedup


def test_tilde_still_deletes_entries_of_mappings():
    experiment = compose(["+exp=sim_smoke", "~gate.min_speedup.eagle3", "~gate.lossless.eagle3"])
    assert "eagle3" not in experiment.base.gate.min_speedup


@pytest.mark.parametrize("override, fragment", [
    ("workload.num_prompts=0", "workload.num_prompts must be a finite number >= 1 and <= 1e+07, got 0"),
    ("+workload.request_rate=-5", "workload.request_rate must be a finite number > 0, got -5"),
    ("workload.duration_s=-1", "workload.duration_s must be a finite number > 0 and <= 86400, got -1"),
    ("workload.timeout_s=0", "workload.timeout_s must be a finite number > 0 and <= 86400, got 0"),
    ("workload.first_byte_timeout_s=0", "workload.first_byte_timeout_s must be a finite number > 0"),
    ("workload.first_byte_timeout_s=-2", "workload.first_byte_timeout_s must be a finite number > 0"),
    ("workload.warmup_requests=-1", "workload.warmup_requests must be a finite number >= 0 and <= 1e+07, got -1"),
    ("gate.max_failed_requests=-1", "gate.max_failed_requests must be a finite number >= 0"),
])
def test_bad_values_are_config_errors(override, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        compose(["+exp=sim_smoke", override])


def test_first_byte_timeout_defaults_to_a_minute_and_null_disables_it():
    assert compose(["+exp=sim_smoke"]).arm("baseline").cfg.workload.first_byte_timeout_s == 60
    assert compose(["+exp=sim_smoke", "workload.first_byte_timeout_s=null"]).arm("baseline").cfg.workload.first_byte_timeout_s is None


def test_a_record_root_under_a_file_is_a_config_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, so no record folder can be made there"):
        compose(["+exp=sim_smoke", f"record.root={tmp_path / 'file' / 'runs'}"])


def test_a_latest_that_is_not_the_link_stops_the_run_before_anything_is_measured(tmp_path):
    # a `latest` folder copied from a CI artifact: the run used to end in a traceback after measuring
    (tmp_path / "latest").mkdir()
    with pytest.raises(ConfigError, match=r"latest is a folder, not the link to the newest record that specgate "
                                          r"keeps there; move it away"):
        compose(["+exp=sim_smoke", f"record.root={tmp_path}"])
    (tmp_path / "latest").rmdir()
    (tmp_path / "latest").symlink_to("elsewhere")  # the link itself, even dangling, is fine
    compose(["+exp=sim_smoke", f"record.root={tmp_path}"])


def test_the_cli_says_config_mistakes_with_exit_4_and_knows_its_version():
    bad = specgate("run", "+exp=nope", refused=True)
    assert bad.returncode == 4 and "exp=nope: no such option" in bad.stderr
    version = specgate("--version")
    assert version.returncode == 0 and version.stdout.startswith("specgate ")


def test_an_attach_url_ending_in_v1_is_said_at_once():
    with pytest.raises(ConfigError, match=r"ends in /v1: give the server's root, e.g. http://127.0.0.1:30000 "):
        compose(["+exp=sim_smoke", "backend=attach", "backend.url=http://127.0.0.1:30000/v1"])
    compose(["+exp=sim_smoke", "backend=attach", "backend.url=http://127.0.0.1:30000"])


def test_a_per_category_threshold_must_be_numbers():
    from harness.config.compose import ConfigError
    from harness.run.compose import compose

    ok = compose(["+exp=sim_smoke", "gate.min_accept_length={eagle3:{all:2.0,code:2.5}}"])
    assert ok.base.gate.min_accept_length["eagle3"]["code"] == 2.5
    with pytest.raises(ConfigError, match=r"gate.min_accept_length.eagle3.code must be a number .*got 'fast'"):
        compose(["+exp=sim_smoke", "gate.min_accept_length={eagle3:{all:2.0,code:fast}}"])


def optional_blocks(node=None, prefix: str = "") -> list[tuple[str, type]]:
    """Every block the schema types Optional[a dataclass] (null by default), engines' options
    blocks left out (a key inside one is refused on another engine's server)."""
    import dataclasses
    import typing

    from harness.config.schema import SpecgateConfig

    found = []
    for name, kind in typing.get_type_hints(node or SpecgateConfig).items():
        path = f"{prefix}{name}"
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is typing.Union and len(args) == 1 and dataclasses.is_dataclass(args[0]):
            if not path.startswith("server."):
                found.append((path, args[0]))
        elif dataclasses.is_dataclass(kind):
            found += optional_blocks(kind, f"{path}.")
    return found


def test_a_block_null_by_default_can_be_set_from_the_command_line_key_by_key_or_whole():
    """Hydra cannot set a key inside a block the config leaves null, nor the block whole
    (OmegaConf failed with a traceback inside its merge); specgate merges such overrides as
    a YAML file would, so `workload.shared_prefix.groups=3` works on any workload."""
    import dataclasses

    blocks = optional_blocks()
    assert "workload.shared_prefix" in [path for path, _ in blocks]
    for path, kind in blocks:
        first = dataclasses.fields(kind)[0]
        default = first.default if first.default is not dataclasses.MISSING else first.default_factory()
        for override in (f"{path}.{first.name}={default}", f"+{path}.{first.name}={default}",
                         f"{path}={{{first.name}: {default}}}"):
            exp = compose(["+exp=sim_smoke", "workload.prompt=null", override])
            block = exp.base
            for part in path.split("."):
                block = block[part]
            assert block[first.name] == default, override
    exp = compose(["+exp=sim_smoke", "workload.prompt=null", "workload.shared_prefix.groups=3",
                   "workload.shared_prefix.prefix_len=40"])
    assert all(arm.cfg.workload.shared_prefix.groups == 3 and arm.cfg.workload.shared_prefix.prefix_len == 40
               and arm.cfg.workload.shared_prefix.suffix_len == 64 for arm in exp.arms)
    off = compose(["+exp=sim_shared_prefix", "workload.shared_prefix=null", "workload.prompt=hi"])
    assert off.base.workload.shared_prefix is None


@pytest.mark.parametrize("override, fragment", [
    ("workload.shared_prefix.grops=3", "workload.shared_prefix.grops: no such key in 'workload.shared_prefix'; valid "
                                       "keys: groups, ordered, prefix_len, prompts_per_group, suffix_len (did you mean 'groups'?)"),
    ("workload.cancel.fractoin=0.1", "did you mean 'fraction'?"),
    ("workload.shared_prefix=5", "workload.shared_prefix must be a mapping of groups, prompts_per_group"),
    ("workload.shared_prefix.groups=0", "workload.shared_prefix.groups must be a finite number >= 1 and <= 1e+07, got 0"),
])
def test_a_bad_value_in_a_block_null_by_default_is_one_sentence(override, fragment):
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", "workload.prompt=null", override])
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("override, sentence", [
    ("gate.min_speedup.eagle3.rato=2", "gate.min_speedup.eagle3.rato: no such key in 'gate.min_speedup.eagle3'; valid "
                                       "keys: over, ratio (did you mean 'ratio'?)"),
    ("+gate.min_speedup.eagle3.rato=2", "gate.min_speedup.eagle3.rato: no such key in 'gate.min_speedup.eagle3'; valid "
                                        "keys: over, ratio (did you mean 'ratio'?)"),
    ("gate.lossless.eagle3.agaist=baseline", "valid keys: against, min_exact_match (did you mean 'against'?)"),
    ("+gate.max_ttft_ms.baseline.p95=30", "gate.max_ttft_ms.baseline.p95: no such key in 'gate.max_ttft_ms.baseline'; "
                                          "valid keys: mean, p50, p90, p99"),
])
def test_a_mistyped_key_inside_a_gates_arm_block_names_the_valid_keys(override, sentence):
    # it got Hydra's words ("no such key (Could not override ...)") and no valid keys
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", override])
    assert sentence in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_an_unknown_launcher_lists_every_launcher_there_is():
    # it listed conf/hydra/launcher/ only (slurm); the plugins' launchers are options too
    with pytest.raises(ConfigError) as caught:
        compose(["+exp=sim_smoke", "hydra/launcher=nope"])
    message = str(caught.value)
    assert message.startswith("hydra/launcher=nope: no such option in 'hydra/launcher'; valid choices: "), message
    listed = message.split("valid choices: ", 1)[1].split(" (", 1)[0].split(", ")
    assert {"basic", "submitit_slurm", "submitit_local", "slurm", "ray"} <= set(listed), message
