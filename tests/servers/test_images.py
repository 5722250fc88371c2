"""Server images (harness/servers/images.py) against the real Docker engine.

`make install` starts an engine (scripts/ensure_docker.sh) and builds the simulator's
images, so these tests expect an engine and fail, saying so, when none answers. Everything
they create is labelled and removed at the end.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import docker
import pytest
import requests

from harness.config.schema import BuildConfig
from harness.servers import images
from harness.servers.images import BuildContext, ImageError, ImageInfo, docker_client, ensure_image
from harness.servers.labels import labelled_containers

REPO = Path(__file__).resolve().parents[2]
TEST_KIND = "specgate-test"  # specgate.kind label of the images built by these tests
TEST_LABEL = {"specgate": "1", "specgate.test": "test_images"}  # on the containers they start
MISSING = "specgate-test/no-such-sglang:v0"  # an image no engine or registry has


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        engine = docker_client()
    except ImageError as exc:
        pytest.fail(f"{exc} (these tests need the engine that `make install` starts)", pytrace=False)
    yield engine
    for container in labelled_containers(engine, "specgate.test=test_images"):
        container.remove(force=True)
    for image in engine.images.list(filters={"label": f"specgate.kind={TEST_KIND}"}):
        for tag in image.tags:
            engine.images.remove(tag, force=True)
    engine.close()


def _context(root: Path, **files: str) -> BuildContext:
    for name, text in files.items():
        (root / name).write_text(text)
    return BuildContext({name: root / name for name in files}, {"BASE_IMAGE": "scratch-base:1"})


# ----------------------------------------------------------------------- hashing (no engine)
def test_content_hash_is_stable_and_follows_the_context(tmp_path: Path) -> None:
    first = _context(tmp_path, Dockerfile="FROM x\n", **{"a.txt": "one"})
    again = BuildContext(dict(first.files), dict(first.build_args))
    assert first.content_hash() == again.content_hash()
    assert first.tarball().getvalue() == again.tarball().getvalue()  # same files, same bytes

    base = first.content_hash()
    (tmp_path / "a.txt").write_text("two")  # files are read when hashed: the change shows
    assert first.content_hash() != base
    (tmp_path / "a.txt").write_text("one")
    assert first.content_hash() == base
    assert BuildContext(first.files, {"BASE_IMAGE": "scratch-base:2"}).content_hash() != base
    assert BuildContext(first.files, {**first.build_args, "X": "1"}).content_hash() != base
    assert BuildContext(first.files, first.build_args, extra={"base_id": "sha256:1"}).content_hash() != base
    os.chmod(tmp_path / "a.txt", 0o755)
    assert first.content_hash() != base  # the executable bit reaches the image too


def test_sim_context_holds_only_the_simulator() -> None:
    context = images.sim_context("specgate/sim-base:x")
    names = set(context.files)
    assert {"Dockerfile", "harness/__init__.py", "harness/interrupts.py", "harness/sim/__main__.py"} <= names
    assert all(n in ("Dockerfile", *images.SIM_SHARED_FILES) or n.startswith("harness/sim/") for n in names)
    assert context.build_args == {"BASE_IMAGE": "specgate/sim-base:x"}
    with tarfile.open(fileobj=context.tarball()) as tar:
        assert sorted(tar.getnames()) == sorted(names)


def test_debootstrapped_bases_are_named_by_suite_and_packages(tmp_path: Path) -> None:
    sim, vllm = images.sim_base_tag(), images.host_venv_base_tag(BuildConfig(context="containers/vllm-cpu", suite="bookworm"))
    assert sim.startswith("specgate/sim-base:") and vllm.startswith("specgate/vllm-cpu-base:")
    assert sim.split(":")[1] != vllm.split(":")[1]
    (tmp_path / "packages.txt").write_text("python3  # a comment\nlibnuma1\n")
    tag = images.rootfs_tag("specgate/x", "bookworm", tmp_path / "packages.txt")
    assert tag == images.rootfs_tag("specgate/x", "bookworm", tmp_path / "packages.txt")
    assert tag != images.rootfs_tag("specgate/x", "trixie", tmp_path / "packages.txt")
    (tmp_path / "packages.txt").write_text("python3\n")
    assert tag != images.rootfs_tag("specgate/x", "bookworm", tmp_path / "packages.txt")


def test_simulator_imports_only_what_its_image_has() -> None:
    """harness/sim may import the standard library, aiohttp, prometheus_client, itself and the
    modules of harness/ its image also holds (harness.interrupts, which imports only the
    standard library)."""
    allowed = set(sys.stdlib_module_names) | {"aiohttp", "prometheus_client", "harness"}
    shared = {name.removesuffix(".py").replace("/", ".") for name in images.SIM_SHARED_FILES} - {"harness.__init__"}
    for path in sorted((REPO / "harness" / "sim").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                assert top in allowed, f"{path.relative_to(REPO)} imports {module}, which the sim image lacks"
                if top == "harness":
                    assert module == "harness" or module.startswith("harness.sim") or module in shared, (
                        f"{path.relative_to(REPO)} imports {module}: the sim image has only harness/sim "
                        f"and {', '.join(sorted(shared))}")
    for name in images.SIM_SHARED_FILES:  # and what it holds besides imports nothing but the standard library
        for node in ast.walk(ast.parse((REPO / name).read_text(), name)):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "level", 0) == 0:
                for module in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]):
                    assert module.split(".")[0] in set(sys.stdlib_module_names) | {"__future__"}, (name, module)


def test_patched_context_follows_patches_and_base(tmp_path: Path) -> None:
    one, two = tmp_path / "one.patch", tmp_path / "two.patch"
    one.write_text("--- a/x\n+++ b/x\n")
    two.write_text("--- a/y\n+++ b/y\n")
    cfg = BuildConfig(kind="patched", image="lmsysorg/sglang:v0.5.23", patches=[str(one), str(two)],
                      context="containers/sglang")
    context = images.patched_context(cfg, cfg.image, "sha256:aaa")
    assert [n for n in context.files if n.startswith("patches/")] == ["patches/000-one.patch", "patches/001-two.patch"]
    base = context.content_hash()
    assert images.patched_context(cfg, cfg.image, "sha256:aaa").content_hash() == base
    assert images.patched_context(cfg, cfg.image, "sha256:bbb").content_hash() != base  # re-pulled base
    assert images.patched_context(replace(cfg, patches=[str(two), str(one)]), cfg.image, "sha256:aaa").content_hash() != base
    assert images.patched_context(replace(cfg, git_ref="v0.5.24"), cfg.image, "sha256:aaa").build_args["GIT_REF"] == "v0.5.24"
    one.write_text("--- a/x\n+++ b/x\n@@\n")
    assert images.patched_context(cfg, cfg.image, "sha256:aaa").content_hash() != base
    with pytest.raises(ImageError, match="patch nope.patch .* is not a file"):
        images.patched_context(replace(cfg, patches=["nope.patch"]), cfg.image)


@pytest.mark.parametrize("layout", ["checkout", "wheel"])
def test_apply_patches_finds_sglang(tmp_path: Path, layout: str) -> None:
    """containers/sglang/apply-patches.sh on a fake SGLang: a git checkout or a wheel."""
    if not (shutil.which("patch") or shutil.which("git")):
        pytest.skip("neither patch nor git is installed here")
    root = tmp_path / "sglang-repo"
    package = root / "python" / "sglang" if layout == "checkout" else tmp_path / "site" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "x.py").write_text("A = 1\n")
    if layout == "checkout":
        (root / ".git").mkdir()
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "000-a.patch").write_text(
        "--- a/python/sglang/srt/x.py\n+++ b/python/sglang/srt/x.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(package.parent)}
    script = REPO / "containers" / "sglang" / "apply-patches.sh"
    done = subprocess.run(["sh", str(script), str(patches)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (package / "srt" / "x.py").read_text() == "A = 2\n"
    again = subprocess.run(["sh", str(script), str(patches)], env=env, capture_output=True, text=True)
    assert again.returncode != 0 and "000-a.patch does not apply" in again.stderr  # applied already


# ----------------------------------------------------------------------- engine
def test_no_engine_is_one_sentence() -> None:
    started = time.monotonic()
    with pytest.raises(ImageError) as caught:
        docker_client("unix:///nonexistent/specgate-test.sock")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert message.startswith("no Docker engine answers at unix:///nonexistent/specgate-test.sock (")
    assert "scripts/ensure_docker.sh" in message and "\n" not in message


def test_build_is_reused_when_unchanged(client: docker.DockerClient, tmp_path: Path) -> None:
    base = images.ensure_sim_base(client, lambda _: None)  # built by make install: the only local base
    nonce = uuid.uuid4().hex  # this run's own image, whatever an earlier run left
    files = {"Dockerfile": "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY hello.txt /hello.txt\n", "hello.txt": nonce}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    context = BuildContext({n: tmp_path / n for n in files}, {"BASE_IMAGE": base.tag})
    lines: list[str] = []
    first = images.build_image(context, "specgate/test-images", TEST_KIND, client, lines.append)
    second = images.build_image(context, "specgate/test-images", TEST_KIND, client, lines.append)
    assert first.built and not second.built
    assert first.tag == second.tag == f"specgate/test-images:{context.content_hash()}"
    assert first.id == second.id and first.digest is None
    assert any("built in" in line for line in lines)
    labels = client.images.get(first.tag).labels
    assert labels["specgate"] == "1" and labels["specgate.kind"] == TEST_KIND
    assert labels["specgate.content-hash"] == context.content_hash()

    (tmp_path / "hello.txt").write_text(nonce + "!")
    third = images.build_image(context, "specgate/test-images", TEST_KIND, client, lines.append)
    assert third.built and third.tag != first.tag and third.id != first.id


def test_a_failed_build_leaves_no_image_of_its_steps(client: docker.DockerClient, tmp_path: Path) -> None:
    base = images.ensure_sim_base(client, lambda _: None)
    nonce = uuid.uuid4().hex  # the label of the good steps' images, which the failed step leaves behind
    (tmp_path / "Dockerfile").write_text(f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nLABEL specgate.test-nonce={nonce}\n"
                                         "RUN echo one > /one\nRUN exit 3\n")
    context = BuildContext({"Dockerfile": tmp_path / "Dockerfile"}, {"BASE_IMAGE": base.tag})
    with pytest.raises(ImageError, match="failed"):
        images.build_image(context, "specgate/test-images", TEST_KIND, client, lambda _: None)
    assert client.api.images(all=True, filters={"label": f"specgate.test-nonce={nonce}"}) == []
    assert client.images.get(base.tag).id == base.id  # the base it was built on stays


def test_sim_image_is_labelled_and_reused(client: docker.DockerClient) -> None:
    info = ensure_image(BuildConfig(kind="simulator"), client)
    again = ensure_image(BuildConfig(kind="simulator", build_args={}), client)
    assert isinstance(info, ImageInfo) and not again.built and again.id == info.id
    assert info.tag.startswith("specgate/sim:")
    for tag in (info.tag, images.sim_base_tag()):
        assert client.images.get(tag).labels.get("specgate") == "1", tag


def test_sim_image_runs_the_simulator(client: docker.DockerClient) -> None:
    info = ensure_image(BuildConfig(kind="simulator"), client)
    container = client.containers.run(
        info.tag,
        ["--model-path", "sim/model", "--host", "0.0.0.0", "--port", "30000", "--sim-startup-s", "0.2"],
        detach=True, labels=TEST_LABEL, ports={"30000/tcp": ("127.0.0.1", None)},
    )
    try:
        container.reload()
        binding = container.ports["30000/tcp"][0]
        assert binding["HostIp"] == "127.0.0.1"  # published on loopback only
        base_url = f"http://127.0.0.1:{binding['HostPort']}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            container.reload()
            assert container.status == "running", container.logs().decode(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "the simulator in its container never became healthy"
            time.sleep(0.2)
        reply = requests.post(f"{base_url}/v1/chat/completions", timeout=30, json={
            "model": "sim/model", "messages": [{"role": "user", "content": "count to 10"}], "max_tokens": 8})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 8
        assert body["choices"][0]["message"]["content"]
        # The environment checks look at the server's processes from inside the container.
        code, out = container.exec_run(["ps", "-eo", "pid,args"])
        assert code == 0 and b"harness.sim" in out, out
    finally:
        container.remove(force=True)


def test_missing_release_fails_fast_in_one_sentence(client: docker.DockerClient) -> None:
    started = time.monotonic()
    with pytest.raises(ImageError) as caught:
        ensure_image(BuildConfig(kind="release", image=MISSING), client)
    assert time.monotonic() - started < images.PULL_TIMEOUT_S + 10  # never a hang
    message = str(caught.value)
    assert message.startswith(f"image {MISSING} is neither on this engine nor pullable (")
    assert message.endswith("); build or load it first (docker load -i ...)") and "\n" not in message


def test_patched_with_missing_base_fails_in_one_sentence(client: docker.DockerClient) -> None:
    cfg = BuildConfig(kind="patched", image=MISSING, context="containers/sglang")
    with pytest.raises(ImageError) as caught:
        ensure_image(cfg, client)
    message = str(caught.value)
    assert message.startswith(f"cannot build the patched image: base image {MISSING} is neither on this engine")
    assert "\n" not in message


def test_unknown_kind_is_one_sentence(client: docker.DockerClient) -> None:
    with pytest.raises(ImageError, match=r"build.kind='nope' has no image; valid kinds: simulator, release, patched, host_venv"):
        ensure_image(BuildConfig(kind="nope"), client)


def test_a_release_without_its_image_is_one_sentence(client: docker.DockerClient) -> None:
    with pytest.raises(ImageError, match="build.image is not set; build.kind=release needs a release image tag"):
        ensure_image(BuildConfig(kind="release"), client)


def test_prune_removes_only_sim_images_of_other_code(client: docker.DockerClient) -> None:
    current = ensure_image(BuildConfig(kind="simulator"), client)
    base = images.sim_base_tag()
    other = images.build_image(images.sim_context(base, {"SPECGATE_TEST": uuid.uuid4().hex}), images.SIM_REPO,
                               "sim", client, lambda _: None)  # stands for an older simulator
    try:
        removed = images.prune_sim_images(client, lambda _: None)
        assert other.tag in removed and current.tag not in removed and base not in removed
        assert client.images.get(current.tag).id == current.id
    finally:
        if other.tag in [t for i in client.images.list(images.SIM_REPO) for t in i.tags]:
            client.images.remove(other.tag, force=True)


def test_the_debian_mirror_comes_from_this_machines_apt_sources(tmp_path, monkeypatch):
    from harness.servers import images

    listing, folder = tmp_path / "sources.list", tmp_path / "sources.list.d"
    folder.mkdir()
    (folder / "other.sources").write_text("Types: deb\nURIs: http://mirror.example/ubuntu\nSuites: x\n")
    (folder / "debian.sources").write_text("Types: deb\nURIs: http://mirror.example/debian/\nSuites: trixie\n")
    monkeypatch.setattr(images, "APT_SOURCES", (listing, folder))
    monkeypatch.delenv("SPECGATE_DEBIAN_MIRROR", raising=False)
    assert images.debian_mirror() == "http://mirror.example/debian"
    listing.write_text("deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n")
    assert images.debian_mirror() == "http://one.example/debian"
    monkeypatch.setenv("SPECGATE_DEBIAN_MIRROR", "http://set.example/debian")
    assert images.debian_mirror() == "http://set.example/debian"
