"""The plugin takes Hydra overrides off pytest's command line, never mistaking a path or
an option's value for one."""

import pytest

from harness.plugin import is_override, ordered_arms
from harness.config.compose import PYTEST_VALUE_OPTIONS as VALUE_OPTIONS
from harness.run.compose import compose
from tests.support.runs import run_suites


@pytest.mark.parametrize("token", ["+exp=sim_smoke", "workload.max_tokens=64", "workload=chat_short",
                                   "++server.env.X=1", "~gate.min_output_tok_s", "backend.url=http://127.0.0.1:1"])
def test_overrides_are_recognised(token):
    assert is_override(token, None, VALUE_OPTIONS)


@pytest.mark.parametrize("token, previous", [("suites/", None), ("tests/test_config.py::test_x", None),
                                             ("-q", None), ("--conf-dir=conf", None),
                                             ("a=b", "-k"), ("addopts=", "-o"), ("not x", "-m")])
def test_paths_and_option_values_are_not_overrides(token, previous):
    assert not is_override(token, previous, VALUE_OPTIONS)


def test_a_file_whose_name_looks_like_an_override_stays_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "odd=name.py").write_text("")
    assert not is_override("odd=name.py", None, VALUE_OPTIONS)


def test_the_plain_arm_runs_first():
    experiment = compose(["+exp=sim_smoke", "plain_arm=eagle3"])
    assert experiment.arm_names == ["baseline", "eagle3"]
    assert ordered_arms(experiment) == ["eagle3", "baseline"]


def collect(*args: str):
    return run_suites("+exp=sim_smoke", "--collect-only", "-q", *args, timeout=120)


def arms_of(stdout: str) -> set[str]:
    return {line.rsplit("[", 1)[1].rstrip("]") for line in stdout.splitlines() if line.startswith("suites/") and "[" in line}


def test_arms_are_selected_by_id_not_by_a_substring_of_the_file_name():
    # test_baseline.py::...[eagle3] contains "baseline": -k alone would start eagle3's server too
    for args in (("-k", "baseline"), ("--arm", "baseline")):
        proc = collect(*args)
        assert proc.returncode == 0, proc.stderr
        assert arms_of(proc.stdout) == {"baseline"}, args
    both = collect("--arm", "baseline,eagle3")
    assert arms_of(both.stdout) == {"baseline", "eagle3"}
    suite = collect("-k", "test_baseline")  # -k for anything else is pytest's own
    assert arms_of(suite.stdout) == {"baseline", "eagle3"}


def test_an_unknown_arm_is_a_usage_error():
    proc = collect("--arm", "eagle")
    assert proc.returncode == 4
    assert "specgate: --arm eagle: no such arm in experiment 'sim_smoke'; arms: baseline, eagle3" in proc.stderr


def test_pytests_parser_and_the_shared_list_agree_on_the_options_that_take_a_value(pytestconfig):
    """The plugin asks pytest's parser; `specgate` and the parser's fallback use the one
    shared list, which must hold every value option pytest and this plugin have among them."""
    from harness.plugin import options_taking_values

    from_parser = options_taking_values(pytestconfig._parser)  # noqa: SLF001 (the plugin's own input)
    assert {"-k", "-m", "-o", "-p", "-c", "--rootdir", "--basetemp", "--junitxml", "--conf-dir", "--replay",
            "--arm"} <= from_parser
    assert VALUE_OPTIONS <= from_parser


def test_the_terminal_summary_ends_saying_whether_the_run_gated_anything():
    from types import SimpleNamespace

    from harness.gates.verdict import Verdict
    from harness.plugin import RUNNER, pytest_terminal_summary

    lines: list[str] = []
    reporter = SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write=lines.append,
                               write_line=lambda text, **markup: lines.append(text))
    untrusted = Verdict("client_bound", "eagle3", True, 25.0, 20.0, "x", inconclusive=True,
                        cause="client-bound: event-loop lag p99 25 ms")
    runner = SimpleNamespace(recorder=SimpleNamespace(started=True, path="runs/x"), scrub=lambda text: text,
                             summary=lambda: "# specgate: x\n", verdicts=[untrusted])
    pytest_terminal_summary(reporter, 0, SimpleNamespace(stash={RUNNER: runner}))
    assert lines[-2:] == ["This run gated nothing it measured: 1 verdict(s) inconclusive "
                          "(eagle3: client-bound: event-loop lag p99 25 ms).", "run record: runs/x"]
