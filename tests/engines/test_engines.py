"""Engines as classes: each owns its launch command, environment, health routes, process
count, request hooks, info routes, 400 shape and metric names; nothing outside
harness/engines/ (and the simulator itself) names an engine or branches on one."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.config.compose import ConfigError
from harness.run.compose import compose
from harness.engines import ENGINES, engine_of
from harness.engines.base import Engine, Launch
from harness.engines.legacy import upgrade_config
from harness.servers.process import ProcessServer

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("harness/engines/", "harness/sim/")
# Engines by name: ours, and those a newcomer would add next. The simulator's name ("sim")
# is too common a word to search strings for; comparisons with it are caught below.
ENGINE_WORDS = re.compile(r"sglang|vllm|sglext|llama[.-]?cpp|llama-server|trt-?llm|tensorrt", re.IGNORECASE)


# --------------------------------------------------------------------------- the rule
def docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def mentions_engine(node: ast.AST) -> bool:
    """`cfg.server.engine`, `engine.name`, `self.engine`...: an expression about an engine."""
    text = ast.unparse(node)
    return "engine" in text.lower()


def violations(source: str, where: str) -> list[str]:
    """Strings naming an engine (docstrings aside: prose may name what it explains) and
    comparisons of anything engine-ish with an engine's name."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if ENGINE_WORDS.search(node.value):
                found.append(f"{where}:{node.lineno}: the string {node.value[:60]!r} names an engine")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
            names += [e.value for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set))
                      for e in s.elts if isinstance(e, ast.Constant)]
            if any(n in ENGINES for n in names) and any(mentions_engine(s) for s in sides):
                found.append(f"{where}:{node.lineno}: `{ast.unparse(node)}` branches on the engine")
    return found


def checked_files() -> list[Path]:
    files = sorted((ROOT / "harness").rglob("*.py")) + sorted((ROOT / "suites").rglob("*.py"))
    return [f for f in files if not f.relative_to(ROOT).as_posix().startswith(ALLOWED)]


def test_no_code_outside_the_engines_names_or_branches_on_an_engine():
    found = [v for f in checked_files() for v in violations(f.read_text(), f.relative_to(ROOT).as_posix())]
    assert not found, "\n".join(found)


def test_the_rule_catches_what_it_forbids():
    planted = textwrap.dedent('''
        """A docstring may say SGLang."""
        def launch(cfg):
            if cfg.server.engine == "vllm":
                return ["python3", "-m", "sglang.launch_server"]
            if engine_of(cfg).name in ("sim", "other"):
                return event.get("sglext")
            return "llama-server" if cfg.server.engine != "sim" else None
    ''')
    found = violations(planted, "planted.py")
    assert len(found) == 7, "\n".join(found)
    assert not any(":2:" in v for v in found)  # the docstring is prose
    assert checked_files() and all("harness/engines" not in str(f) for f in checked_files())


# --------------------------------------------------------------------------- each engine
def arm_cfg(exp: str, arm: str, *overrides: str):
    return compose([f"+exp={exp}", *overrides]).arm(arm).typed  # what an engine takes: the schema's types


def test_each_engine_launches_its_own_command():
    sim = arm_cfg("sim_smoke", "eagle3", "nccl=pcie_tuned")
    launch = engine_of(sim).launch(sim, 31000, host="127.0.0.1", in_container=False)
    assert launch.executable[1:] == ["-m", "harness.sim"]
    assert launch.args[:4] == ["--model-path", "sim/model", "--tp-size", "1"]
    assert "--speculative-num-draft-tokens" in launch.args and "--sim-decode-step-ms" in launch.args
    in_image = engine_of(sim).launch(sim, 30000, host="0.0.0.0", in_container=True)
    assert in_image.executable == ["python3", "-m", "harness.sim"] and "0.0.0.0" in in_image.args

    vllm = arm_cfg("vllm_cpu_smoke", "draft_self")
    launch = engine_of(vllm).launch(vllm, 31000, host="127.0.0.1", in_container=True)
    assert launch.executable == ["python3.11", "-m", "vllm.entrypoints.openai.api_server"]
    config = launch.args[launch.args.index("--speculative-config") + 1]
    assert '"num_speculative_tokens": 3' in config and "--tp-size" not in launch.args

    real = compose(["+exp=eagle_k2"]).arm("eagle3").typed
    args = engine_of(real).launch(real, 30000, host="0.0.0.0", in_container=True).args
    assert "--speculative-draft-model-path" in args and not any(a.startswith("--sim-") for a in args)


def test_each_engine_brings_its_environment_and_process_count():
    sim = arm_cfg("sim_smoke", "eagle3", "nccl=pcie_tuned")
    env = engine_of(sim).environment(sim)
    assert env["SPT_NOENV"] == "1" and env["PYTHONUNBUFFERED"] == "1"
    assert {k: env[k] for k in sim.nccl.env} == {k: str(v) for k, v in sim.nccl.env.items()}
    k2 = compose(["+exp=eagle_k2_sim"]).arm("eagle3").typed
    assert engine_of(k2).min_processes(k2) == 9  # the server and 8 TP workers
    vllm = arm_cfg("vllm_cpu_smoke", "plain")
    assert ENGINES["vllm"].min_processes(vllm) == 2  # API server + engine core
    assert ENGINES["vllm"].min_processes(replace(vllm, server=replace(vllm.server, tp_size=4))) == 6
    # VLLM_ENABLE_V1_MULTIPROCESSING=0: the worker inside the engine core, still two processes (seen in server.log)
    assert ENGINES["vllm"].min_processes(arm_cfg("vllm_cpu_schedule", "plain")) == 2
    assert ENGINES["vllm"].shm_size(vllm) == "1g" and ENGINES["sglang"].shm_size(vllm) is None


def test_each_engine_knows_the_shape_of_its_400():
    sglang_body = {"object": "error", "type": "Bad Request", "code": 400, "message": "Unsupported Media Type"}
    vllm_body = {"error": {"type": "Bad Request", "code": 400, "message": "Unsupported Media Type"}}
    assert ENGINES["sglang"].bad_request_message(sglang_body) == "Unsupported Media Type"
    assert ENGINES["vllm"].bad_request_message(vllm_body) == "Unsupported Media Type"
    for engine, wrong in (("sglang", vllm_body), ("vllm", sglang_body)):
        with pytest.raises((AssertionError, KeyError)):
            ENGINES[engine].bad_request_message(wrong)


def test_spec_statistics_come_from_where_the_engine_reports_them():
    assert ENGINES["sglang"].spec_stats == "per_request" and ENGINES["sglang"].prometheus.spec_prefix is None
    assert ENGINES["vllm"].spec_stats == "metrics_window" and ENGINES["vllm"].prometheus.spec_prefix
    assert ENGINES["vllm"].request_extras("chat") == {} and ENGINES["vllm"].spec_details({"sglext": {}}) is None
    assert ENGINES["sim"].request_extras("chat") == ENGINES["sglang"].request_extras("chat") != {}
    # what one inter-token latency observation is: a token (SGLang, and so the simulator) or a step (vLLM)
    assert ENGINES["sglang"].prometheus.itl_observed_per == ENGINES["sim"].prometheus.itl_observed_per == "token"
    assert ENGINES["vllm"].prometheus.itl_observed_per == "step"


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides, fragment", [
    (["build=vllm_cpu"], "the build carries engine 'vllm' but server 'sim' is for engine 'sim'"),
    (["server.engine=tgi"], "server.engine 'tgi' is unknown; valid: sglang, sim, vllm"),
    (["build.kind=sglang_release"], None),  # an old kind still composes (read as release + sglang)
    (["server=vllm_tiny", "build=vllm_cpu", "telemetry=off", "workload.api=generate"],
     "workload.api=generate is not served by vllm"),
    (["telemetry=sim", "server=vllm_tiny", "build=vllm_cpu", "drafter=none"], "engine 'vllm' has none"),
])
def test_config_ties_build_server_and_engine(overrides, fragment):
    if fragment is None:
        with pytest.raises(ConfigError, match="carries engine 'sglang' but server 'sim'"):
            compose(["+exp=sim_smoke", *overrides])
        return
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        compose(["+exp=sim_smoke", *overrides])


def test_every_build_composes_with_a_server_of_its_engine():
    servers = {p.stem: OmegaConf.load(p) for p in (ROOT / "conf" / "server").glob("*.yaml")}
    for build in (ROOT / "conf" / "build").glob("*.yaml"):
        engine = OmegaConf.load(build).engine
        assert engine in ENGINES, f"{build.name}: engine {engine!r}"
        assert any(s.get("engine", "sim") == engine for s in servers.values()), f"no conf/server for {build.name}"


def test_records_written_before_build_recipes_are_read_as_what_they_were():
    old = {"build": {"kind": "vllm_cpu", "python": "/v/bin/python"}, "server": {"engine": "vllm"}}
    assert upgrade_config(old)
    assert old["build"] == {"kind": "host_venv", "engine": "vllm", "python": "/v/bin/python",
                            "context": "containers/vllm-cpu", "suite": "bookworm", "image_python": "python3.11"}
    simulated = {"build": {"kind": "sim"}, "server": {"engine": "sglang"}}
    upgrade_config(simulated)
    assert simulated == {"build": {"kind": "simulator", "engine": "sim"}, "server": {"engine": "sim"}}
    assert not upgrade_config({"build": {"kind": "release"}})


def test_an_old_record_replays_as_it_ran(tmp_path):
    """A record written when build.kind was `sim` and the simulator's engine `sglang`."""
    import yaml

    from harness.run.replay import replay_experiment

    experiment = compose(["+exp=sim_smoke"])

    def old(cfg) -> dict:
        data = OmegaConf.to_container(cfg, resolve=True)
        data["build"] = {k: v for k, v in data["build"].items() if k not in ("engine", "context", "suite", "image_python")}
        data["build"]["kind"], data["server"]["engine"] = "sim", "sglang"
        return data

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old(experiment.base)))
    (tmp_path / "overrides.yaml").write_text(yaml.safe_dump({"command_line": ["+exp=sim_smoke"], "arms": {}}))
    for arm in experiment.arms:
        (tmp_path / "arms" / arm.name).mkdir(parents=True)
        (tmp_path / "arms" / arm.name / "config.yaml").write_text(yaml.safe_dump(old(arm.cfg)))
    replayed, _ = replay_experiment(tmp_path, [], ROOT / "conf")
    for arm in replayed.arms:
        assert (arm.cfg.build.kind, arm.cfg.build.engine, arm.cfg.server.engine) == ("simulator", "sim", "sim")


# --------------------------------------------------------------------------- a new engine
class ShellWrapped(Engine):
    """An engine that is not a Python module: a shell script starts the server (the
    simulator underneath), as `llama-server` or `trtllm-serve` would be started."""

    name = "shell_wrapped"
    apis = ("chat", "completions", "generate")
    health_paths = ("/health", "/health_generate")

    def launch(self, cfg, port, host, in_container):
        script = 'echo "wrapped $*"; exec "$PYTHON" -m harness.sim "$@"'
        return Launch(["sh", "-c", script, "shell_wrapped"], ["--model-path", "m", "--port", str(port), "--host", host])

    def environment(self, cfg):
        import sys

        return {**super().environment(cfg), "PYTHON": sys.executable}

    def min_processes(self, cfg):
        return 2  # the server and its one TP worker


def process_server_of(engine: Engine, tmp_path: Path, monkeypatch) -> ProcessServer:
    """sim_smoke's baseline as a process server of `engine`, registered for the test."""
    monkeypatch.setitem(ENGINES, engine.name, engine)
    cfg = compose(["+exp=sim_smoke", "backend=process", f"server.engine={engine.name}", "telemetry=off",
                   f"build.engine={engine.name}"]).arm("baseline").typed
    return ProcessServer("baseline", cfg, tmp_path / "server.log")


def test_an_engine_that_is_not_a_python_module_runs(tmp_path, monkeypatch):
    server = process_server_of(ShellWrapped(), tmp_path, monkeypatch)
    cfg = server.cfg
    try:
        server.start()
        assert server.describe()["command"][:2] == ["sh", "-c"]
        processes = server.processes()
        assert len(processes) >= ShellWrapped().min_processes(cfg)
        assert all(p.environ.get("PYTHON") for p in processes)
    finally:
        server.stop()
    assert "wrapped --model-path m" in (tmp_path / "server.log").read_text()


class TempLeaving(ShellWrapped):
    """An engine that leaves a file in the temp folder at every start, as vLLM leaves its ZMQ
    sockets (ipc:///tmp/<uuid>) and SGLang its port files."""

    name = "temp_leaving"

    def launch(self, cfg, port, host, in_container):
        script = ('"$PYTHON" -c "import tempfile, pathlib; pathlib.Path(tempfile.gettempdir(), \'left-$$\').touch()"; '
                  'exec "$PYTHON" -m harness.sim "$@"')
        return Launch(["sh", "-c", script, "temp_leaving"], ["--model-path", "m", "--port", str(port), "--host", host])


def test_what_an_engine_leaves_in_its_temp_folder_goes_with_the_server(tmp_path, monkeypatch):
    import tempfile

    server = process_server_of(TempLeaving(), tmp_path, monkeypatch)
    try:
        server.start()
        own = Path(server.processes()[0].environ["TMPDIR"])
        assert own.parent == Path(tempfile.gettempdir()) and own.name.startswith("specgate-")
        left = list(own.glob("left-*"))
        assert len(left) == 1  # written there, not in the machine's temp folder
    finally:
        server.stop()
    assert not own.exists() and not Path(tempfile.gettempdir(), left[0].name).exists()


def test_a_temp_folder_the_experiment_sets_is_the_experiments(tmp_path):
    from harness.secrets import BOOK

    cfg = compose(["+exp=sim_smoke", "backend=process", "telemetry=off", f"+server.env.TMPDIR={tmp_path}"]
                  ).arm("baseline").typed
    server = ProcessServer("baseline", cfg, tmp_path / "server.log")
    server.tmp_dir = tmp_path / "own"  # as launch() makes it
    assert BOOK.reveal(server.environment())["TMPDIR"] == str(tmp_path)  # server.env's values are secrets
    server.cfg.server.env.pop("TMPDIR")
    assert server.environment()["TMPDIR"] == str(tmp_path / "own")


# --------------------------------------------------------------------------- own options
def test_each_engine_has_its_own_options_block_and_the_old_shared_keys_still_work():
    from harness.config.schema import ServerConfig
    from harness.engines import ENGINE_OPTIONS

    assert set(ENGINE_OPTIONS) == {"sim", "vllm"} and {"sim", "vllm"} <= {f for f in ServerConfig.__dataclass_fields__}
    vllm = compose(["+exp=vllm_cpu_smoke"]).arm("draft_self").typed
    assert (vllm.server.vllm.dtype, vllm.server.vllm.max_num_seqs, vllm.server.max_num_seqs) == ("float32", 8, None)
    args = engine_of(vllm).launch(vllm, 31000, host="127.0.0.1", in_container=False).args
    assert args[args.index("--max-num-seqs") + 1] == "8" and args[args.index("--dtype") + 1] == "float32"
    # the old spelling of a vLLM option, on the command line of a config written today: read into the block
    old = compose(["+exp=vllm_cpu_smoke", "server.max_num_seqs=4"]).arm("draft_self").typed
    assert (old.server.vllm.max_num_seqs, old.server.max_num_seqs, old.server.vllm.dtype) == (4, None, "float32")
    args = engine_of(old).launch(old, 31000, host="127.0.0.1", in_container=False).args
    assert args[args.index("--max-num-seqs") + 1] == "4"
    new = compose(["+exp=vllm_cpu_smoke", "server.vllm.max_model_len=512"]).arm("draft_self").typed
    assert new.server.vllm.max_model_len == 512
    # another engine's config has no vLLM block, and a stray option of its never reaches its launch
    sim = compose(["+exp=sim_smoke"]).arm("eagle3").typed
    assert sim.server.vllm is None and sim.server.sim is not None


def test_a_record_with_the_old_shared_server_keys_upgrades_into_the_engines_block():
    record = {"server": {"engine": "vllm", "dtype": "float32", "max_model_len": 1024, "max_num_seqs": 8}}
    upgrade_config(record)
    assert record["server"]["vllm"] == {"dtype": "float32", "max_model_len": 1024, "max_num_seqs": 8}
    assert (record["server"]["dtype"], record["server"]["max_num_seqs"]) == (None, None)
