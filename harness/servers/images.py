"""Server images for the docker backend: find, pull or build them, and say which one ran.

Five recipes (`build.kind`), none of which knows an engine; the engine is what the image
carries (`build.engine`) and what `server.engine` starts in it:

- ``simulator``: the simulator, built fully offline. A base image
  ``specgate/sim-base:<hash>`` is a debootstrapped Debian (containers/sim/build-base.sh,
  imported with ``docker import``); ``specgate/sim:<hash>`` adds harness/sim on top
  (containers/sim/Dockerfile).
- ``release``: an engine's published image (``build.image``): the local one, else a pull;
  never a hang.
- ``patched``: the release plus a layer that applies ``patches``, built from the
  Dockerfile and apply-patches.sh in ``build.context``, optionally on a ``git_ref``.
- ``git``: the Dockerfile and files of ``build.context`` in the git repository ``build.repo``
  at the commit ``build.git_ref`` names (harness/servers/git_source.py), on ``build.image``
  (its ``BASE_IMAGE``) when given: what `specgate bisect` builds commit by commit.
- ``host_venv``: ``specgate/<context>-base:<hash>``, a debootstrapped Debian
  ``build.suite`` with the packages listed in ``<build.context>/base-packages.txt``; the
  engine itself is the host venv of ``build.python``, mounted by servers/docker.py.

A built image is tagged with a content hash of everything that went into it (its build
context and build arguments), so an unchanged build is found and reused instead of rebuilt.
Everything this module creates carries the label ``specgate=1``. Besides
``servers/docker.py`` this is the only module that talks to Docker.

    python -m harness.servers.images build-sim     # what `make install` runs
    python -m harness.servers.images sim-tag       # the tag the current code builds (builds nothing)
    python -m harness.servers.images prune-sim     # remove simulator images of older code
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import docker
import docker.errors

from harness import PROJECT_ROOT
from harness.secrets import BOOK
from harness.config.schema import BUILD_KINDS, BuildConfig
from harness.servers.git_source import GitSourceError, commit_of, context_files, repository
from harness.servers.base import ImageError  # defined there: a run catches it without loading the docker SDK

REPO = PROJECT_ROOT
CONTAINERS = REPO / "containers"

LABEL = "specgate"  # every image we create: {LABEL: "1"}
LABELS = {LABEL: "1"}
HASH_LABEL = "specgate.content-hash"
KIND_LABEL = "specgate.kind"

# trixie, not bookworm: harness/sim needs aiohttp >= 3.9 and bookworm ships 3.8.4 (with no
# backport); trixie has aiohttp 3.11 and python 3.13. See containers/sim/base-packages.txt.
SIM_BASE_SUITE = "trixie"
SIM_BASE_REPO = "specgate/sim-base"
SIM_BASE_PACKAGES = CONTAINERS / "sim" / "base-packages.txt"
SIM_REPO = "specgate/sim"
BUILD_BASE = CONTAINERS / "sim" / "build-base.sh"  # debootstrap + tar: every base image here
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


def debian_mirror() -> str | None:
    """SPECGATE_DEBIAN_MIRROR, else the Debian archive this machine's apt already uses."""
    if os.environ.get("SPECGATE_DEBIAN_MIRROR"):
        return os.environ["SPECGATE_DEBIAN_MIRROR"]
    files = [APT_SOURCES[0]] + sorted(APT_SOURCES[1].glob("*.list")) + sorted(APT_SOURCES[1].glob("*.sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"]:  # deb822 .sources
                uris = words[1:]
            elif words[:1] == ["deb"]:  # one-line format: deb [options] URI suite ...
                uris = [w for w in words[1:] if not w.startswith("[") and not w.endswith("]")][:1]
            else:
                continue
            for uri in uris:
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    return None

PULL_TIMEOUT_S = 20.0  # no answer from the engine for this long while pulling: give up
BUILD_TIMEOUT_S = 1800  # one build (the engine streams its log while it works)

Progress = Callable[[str], None]


@dataclass
class ImageInfo:
    tag: str
    id: str
    digest: str | None  # repo digest (pulled images); None for images built here
    built: bool  # True: built (or pulled) now; False: found on the engine and reused
    commit: str | None = None  # build.kind=git: the commit its context was read from



# ----------------------------------------------------------------------- engine
def docker_client(docker_host: str | None = None) -> docker.DockerClient:
    """A client of the engine at `docker_host` (default: DOCKER_HOST or the local socket)."""
    where = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        # ssh:// through the system's ssh, as the docker CLI does: it honours ~/.ssh/config,
        # the agent and known_hosts (the SDK's own paramiko transport is not installed)
        ssh = (docker_host or os.environ.get("DOCKER_HOST") or "").startswith("ssh://")
        client = (docker.DockerClient(base_url=BOOK.reveal(docker_host), use_ssh_client=ssh) if docker_host
                  else docker.from_env(use_ssh_client=ssh))
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageError(f"no Docker engine answers at {where} ({_few_words(exc)}); {engine_hint(where)}") from None
    return client


def engine_hint(where: str) -> str:
    """What to do about an engine that does not answer: start the local one, or reach the remote one."""
    if where.startswith("ssh://"):
        return (f"check that `ssh {where.removeprefix('ssh://')} docker info` works from this machine "
                f"(key, known_hosts, and the docker CLI and engine on that host)")
    if where.startswith("tcp://"):
        return "check that the engine on that host listens there (dockerd -H tcp://...) and that this machine reaches it"
    return "start one with scripts/ensure_docker.sh (as root; `make install` runs it) or set DOCKER_HOST"


def ensure_image(build_cfg: BuildConfig, client: docker.DockerClient, progress: Progress | None = None) -> ImageInfo:
    """The image `build_cfg` asks for, on `client`'s engine: reused, pulled or built."""
    say = progress or (lambda _line: None)
    kind = build_cfg.kind
    if kind == "simulator":
        return ensure_sim_image(client, say, _build_args(build_cfg))
    if kind == "release":
        return ensure_release_image(_required_image(build_cfg), client, say)
    if kind == "patched":
        return ensure_patched_image(build_cfg, client, say)
    if kind == "host_venv":
        return ensure_host_venv_image(build_cfg, client, say)
    if kind == "git":
        return ensure_git_image(build_cfg, client, say)
    raise ImageError(f"build.kind={kind!r} has no image; valid kinds: {', '.join(BUILD_KINDS)}")


# ----------------------------------------------------------------------- release
def ensure_release_image(ref: str, client: docker.DockerClient, say: Progress) -> ImageInfo:
    image = _local(client, ref)
    if image is not None:
        return _info(ref, image, built=False)
    say(f"{ref}: not on this engine, pulling")
    started = time.monotonic()
    try:
        _pull(client, ref, say)
        image = client.images.get(ref)
    except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSErrors
        raise ImageError(
            f"image {ref} is neither on this engine nor pullable ({_few_words(exc)}); "
            f"build or load it first (docker load -i ...)"
        ) from None
    say(f"{ref}: pulled in {time.monotonic() - started:.0f}s")
    return _info(ref, image, built=True)


def _pull(client: docker.DockerClient, ref: str, say: Progress) -> None:
    repository, tag = _split_ref(ref)
    api = client.api
    saved = api.timeout
    # A streamed pull: the timeout bounds each wait for the engine's next progress line, so
    # an unreachable registry fails in seconds while a long, progressing pull goes on.
    api.timeout = PULL_TIMEOUT_S
    try:
        last = ""
        for event in api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise docker.errors.APIError(str(event["error"]))
            status = f"{event.get('status', '')} {event.get('id', '')}".strip()
            if status and status != last and "Downloading" not in status and "Extracting" not in status:
                say(f"{ref}: {status}")
                last = status
    finally:
        api.timeout = saved


# ----------------------------------------------------------------------- sim
def sim_base_tag() -> str:
    return rootfs_tag(SIM_BASE_REPO, SIM_BASE_SUITE, SIM_BASE_PACKAGES)


def ensure_sim_base(client: docker.DockerClient, say: Progress) -> ImageInfo:
    return ensure_rootfs_image(sim_base_tag(), SIM_BASE_SUITE, SIM_BASE_PACKAGES, "sim-base", client, say)


# ----------------------------------------------------------------------- host_venv
def build_context_dir(build_cfg: BuildConfig) -> Path:
    """build.context: a folder of the repository (or an absolute one) with the recipe's files."""
    name = build_cfg.context
    if not name:
        raise ImageError(f"build.context is not set; build.kind={build_cfg.kind} needs the folder "
                         f"of its recipe (e.g. containers/<name>)")
    path = Path(name) if Path(name).is_absolute() else REPO / name
    if not path.is_dir():
        raise ImageError(f"build.context {name} is not a folder (paths are relative to the repository root {REPO})")
    return path


def host_venv_base_tag(build_cfg: BuildConfig) -> str:
    context = build_context_dir(build_cfg)
    suite = build_cfg.suite
    if not suite:
        raise ImageError("build.suite is not set; build.kind=host_venv needs the Debian suite whose python3 "
                         "matches the host venv (e.g. bookworm for python 3.11)")
    packages = context / "base-packages.txt"
    if not packages.is_file():
        raise ImageError(f"build.context {context} has no base-packages.txt (the Debian packages of the base image)")
    return rootfs_tag(f"specgate/{context.name}-base", str(suite), packages)


def ensure_host_venv_image(build_cfg: BuildConfig, client: docker.DockerClient, say: Progress) -> ImageInfo:
    """Only a Debian with the right python3 and the engine's C libraries: the engine itself
    is the host venv's site-packages, which servers/docker.py mounts read-only."""
    tag = host_venv_base_tag(build_cfg)
    context = build_context_dir(build_cfg)
    return ensure_rootfs_image(tag, str(build_cfg.suite), context / "base-packages.txt",
                               f"{context.name}-base", client, say)


# ----------------------------------------------------------------------- debootstrapped bases
def rootfs_tag(repository: str, suite: str, packages_file: Path) -> str:
    """`repository:<hash>` of the suite, the package list and build-base.sh."""
    digest = hashlib.sha256()
    for part in [suite, *_read_list(packages_file)]:
        digest.update(part.encode() + b"\0")
    digest.update(BUILD_BASE.read_bytes())
    return f"{repository}:{digest.hexdigest()[:12]}"


def ensure_rootfs_image(tag: str, suite: str, packages_file: Path, kind: str,
                        client: docker.DockerClient, say: Progress) -> ImageInfo:
    """`tag`: a minbase Debian `suite` with the packages in `packages_file`, debootstrapped
    (containers/sim/build-base.sh) and imported; reused when the engine has it."""
    image = _local(client, tag)
    if image is not None:
        return _info(tag, image, built=False)
    mirror = _check_can_debootstrap(tag)
    say(f"{tag}: building (debootstrap {suite} from {mirror}, a minute or two)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"specgate-{kind}-", dir=os.environ.get("SPECGATE_BUILD_TMP")) as tmp:
        out = Path(tmp) / "rootfs.tar"
        proc = subprocess.run(["bash", str(BUILD_BASE), suite, mirror, str(out), *_read_list(packages_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout.splitlines():
            say(f"{tag}: {line}")
        if proc.returncode != 0:
            tail = proc.stdout.strip().splitlines()[-1:] or ["no output"]
            raise ImageError(f"building {tag} failed in containers/sim/build-base.sh ({tail[0]}); is the Debian mirror {mirror} reachable?")
        image = _import_rootfs(out, tag, kind, client)
    say(f"{tag}: built in {time.monotonic() - started:.0f}s")
    return _info(tag, image, built=True)


def _check_can_debootstrap(tag: str) -> str:
    """The Debian mirror to build `tag` from, once debootstrap and root are known to be here."""
    if shutil.which("debootstrap") is None:
        raise ImageError(f"building {tag} needs debootstrap, which is not installed; run scripts/ensure_docker.sh (as root) or make install")
    if os.geteuid() != 0:
        raise ImageError(f"building {tag} needs root (debootstrap); run `make install` as root once, or load the image (docker load -i ...)")
    mirror = debian_mirror()
    if mirror is None:
        raise ImageError(f"no Debian archive found in this machine's apt sources to build {tag} from; "
                         "set SPECGATE_DEBIAN_MIRROR to one")
    return mirror


def _import_rootfs(tar: Path, tag: str, kind: str, client: docker.DockerClient):
    repository, version = _split_ref(tag)
    changes = [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
        *(f"LABEL {key}={value}" for key, value in {**LABELS, KIND_LABEL: kind, HASH_LABEL: version}.items()),
    ]
    try:
        client.api.import_image(src=str(tar), repository=repository, tag=version, changes=changes)
        return client.images.get(tag)
    except docker.errors.DockerException as exc:
        raise ImageError(f"importing {tag} into the engine failed ({_few_words(exc)})") from None


# What the simulator's image holds of harness/ besides harness/sim: the package and the one
# module every program of the project sets its signals through (both import nothing else).
SIM_SHARED_FILES = ("harness/__init__.py", "harness/interrupts.py")


def sim_context(base_tag: str, build_args: Mapping[str, str] | None = None) -> "BuildContext":
    files = {"Dockerfile": CONTAINERS / "sim" / "Dockerfile", **{name: REPO / name for name in SIM_SHARED_FILES}}
    for path in sorted((REPO / "harness" / "sim").rglob("*.py")):
        files[path.relative_to(REPO).as_posix()] = path
    return BuildContext(files, {"BASE_IMAGE": base_tag, **(build_args or {})})


def ensure_sim_image(client: docker.DockerClient, say: Progress, build_args: Mapping[str, str] | None = None) -> ImageInfo:
    base = ensure_sim_base(client, say)
    return build_image(sim_context(base.tag, build_args), SIM_REPO, "sim", client, say)


# ----------------------------------------------------------------------- patched
def patched_context(build_cfg: BuildConfig, base_ref: str, base_id: str | None = None) -> "BuildContext":
    context = build_context_dir(build_cfg)
    files: dict[str, Path | bytes] = {"Dockerfile": context / "Dockerfile", "apply-patches.sh": context / "apply-patches.sh"}
    for name, path in files.items():
        if not path.is_file():
            raise ImageError(f"build.context {context} has no {name}")
    patches = list(build_cfg.patches)
    for index, name in enumerate(patches):
        path = (REPO / name) if not Path(name).is_absolute() else Path(name)
        if not path.is_file():
            raise ImageError(f"patch {name} (build.patches) is not a file; patch paths are relative to the repository root {REPO}")
        files[f"patches/{index:03d}-{path.name}"] = path
    if not patches:
        files["patches/"] = b""  # the Dockerfile COPYs the folder; an empty one is fine
    args = {"BASE_IMAGE": base_ref, **_build_args(build_cfg)}
    git_ref = build_cfg.git_ref
    if git_ref:
        args["GIT_REF"] = str(git_ref)
    # The base's id is part of the hash (not only its tag): a re-pulled or re-loaded
    # release with the same tag gets a fresh patched image.
    return BuildContext(files, args, extra={"base_id": base_id or ""})


def ensure_patched_image(build_cfg: BuildConfig, client: docker.DockerClient, say: Progress) -> ImageInfo:
    base_ref = _required_image(build_cfg)
    try:
        base = ensure_release_image(base_ref, client, say)
    except ImageError as exc:
        raise ImageError(f"cannot build the patched image: base {exc}") from None
    name = build_context_dir(build_cfg).name
    return build_image(patched_context(build_cfg, base.tag, base.id), f"specgate/{name}-patched", f"{name}-patched", client, say)


# ----------------------------------------------------------------------- git
def git_context(build_cfg: BuildConfig, base: ImageInfo | None) -> tuple["BuildContext", str]:
    """The context build.context holds in build.repo at build.git_ref, and that commit's id."""
    try:
        repo = repository(build_cfg.repo)
        commit = commit_of(repo, build_cfg.git_ref)
        files = context_files(repo, commit, build_cfg.context)
    except GitSourceError as exc:
        raise ImageError(str(exc)) from None
    args = {**({"BASE_IMAGE": base.tag} if base else {}), **_build_args(build_cfg)}
    return BuildContext(files, args, extra={"commit": commit, "base_id": base.id if base else ""}), commit


def ensure_git_image(build_cfg: BuildConfig, client: docker.DockerClient, say: Progress) -> ImageInfo:
    """`specgate/git-<repository's folder>:<hash>`: the commit's context, on build.image when given."""
    base = None
    if build_cfg.image:
        try:
            base = ensure_release_image(str(build_cfg.image), client, say)
        except ImageError as exc:
            raise ImageError(f"cannot build {build_cfg.git_ref} of {build_cfg.repo}: base {exc}") from None
    context, commit = git_context(build_cfg, base)
    name = re.sub(r"[^a-z0-9_.-]+", "-", Path(str(build_cfg.repo)).resolve().name.lower()).strip("-.") or "repo"
    info = build_image(context, f"specgate/git-{name}", "git", client, say)
    info.commit = commit
    return info


# ----------------------------------------------------------------------- building
class BuildContext:
    """A docker build context assembled from chosen files, with a content hash.

    `files` maps a path inside the context to a file on disk (or bytes, or (bytes, mode);
    a name ending in "/" is an empty folder). The hash covers every path, its bytes and executable bit,
    the build arguments and `extra`, so it changes exactly when the build could.
    """

    def __init__(self, files: Mapping[str, Path | bytes | tuple[bytes, int]], build_args: Mapping[str, str], extra: Mapping[str, str] | None = None):
        self.files = dict(sorted(files.items()))
        self.build_args = {str(k): str(v) for k, v in sorted(build_args.items())}
        self.extra = dict(sorted((extra or {}).items()))

    def _entries(self) -> Iterable[tuple[str, bytes, int]]:
        for name, source in self.files.items():
            if isinstance(source, bytes):
                yield name, source, 0o644
            elif isinstance(source, tuple):  # (bytes, mode): a file read from git
                yield name, source[0], source[1]
            else:
                mode = 0o755 if os.access(source, os.X_OK) else 0o644
                yield name, Path(source).read_bytes(), mode

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for name, data, mode in self._entries():
            digest.update(f"file {name} {mode:o} {len(data)}\0".encode())
            digest.update(data)
        for key, value in [*self.build_args.items(), *self.extra.items()]:
            digest.update(f"arg {key}={value}\0".encode())
        return digest.hexdigest()[:12]

    def tarball(self) -> io.BytesIO:
        """The context as a tar (fixed owners and times: the same files give the same bytes)."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data, mode in self._entries():
                info = tarfile.TarInfo(name.rstrip("/"))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
                if name.endswith("/"):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(data), mode
                    tar.addfile(info, io.BytesIO(data))
        buffer.seek(0)
        return buffer


def build_image(context: BuildContext, repository: str, kind: str, client: docker.DockerClient, say: Progress) -> ImageInfo:
    """Build `context` as `repository:<content hash>`, or reuse the image that tag names."""
    content_hash = context.content_hash()
    tag = f"{repository}:{content_hash}"
    image = _local(client, tag)
    if image is not None:
        return _info(tag, image, built=False)
    say(f"{tag}: building")
    started = time.monotonic()
    steps: list[str] = []
    try:
        # The low-level build streams the engine's log as it goes (live progress).
        for chunk in client.api.build(
            fileobj=context.tarball(), custom_context=True, tag=tag, buildargs=BOOK.reveal(context.build_args),
            labels={**LABELS, KIND_LABEL: kind, HASH_LABEL: content_hash}, rm=True, forcerm=True,
            pull=False, decode=True, timeout=BUILD_TIMEOUT_S,
        ):
            if "error" in chunk:
                detail = str(chunk.get("error", "")).strip().splitlines() or ["unknown error"]
                last = " | ".join(" ".join(step.split()) for step in steps[-2:]) or "none"  # one line: a step can hold several
                remove_failed_build(client, steps)
                raise ImageError(f"building {tag} failed: {detail[-1]} (last steps: {last})")
            line = str(chunk.get("stream", "")).strip()
            if line:
                steps.append(line)
                if not line.startswith(("--->", "Removing intermediate container")):  # engine chatter
                    say(f"{tag}: {line}")
        image = client.images.get(tag)
    except docker.errors.DockerException as exc:
        raise ImageError(f"building {tag} failed ({_few_words(exc)})") from None
    say(f"{tag}: built in {time.monotonic() - started:.1f}s")
    return _info(tag, image, built=True)


STEP_IMAGE = re.compile(r"---> ([0-9a-f]{12})")  # the engine's "---> <image id>" after each step


def remove_failed_build(client: docker.DockerClient, steps: list[str]) -> None:
    """A build that failed leaves its last good step's image, untagged, with our labels
    (inherited from the base): one more dangling image per failed build (a commit of a bisect
    that does not compile, every time it is probed). Removing it removes its untagged parents
    with it; an image tagged or used by another build stays (the engine refuses)."""
    found = [match.group(1) for line in steps for match in [STEP_IMAGE.fullmatch(line)] if match]
    if not found:
        return
    try:
        if not client.images.get(found[-1]).tags:  # the base itself when the first step failed
            client.images.remove(found[-1])
    except docker.errors.DockerException:
        pass  # the engine's own reason to keep it (a child image, a container): kept


def labelled_images(client: docker.DockerClient, labels: str | list[str]) -> list:
    """The images carrying `labels`, leaving out those removed while the list is read (the
    SDK lists ids, then inspects each; it has no ignore_removed for images)."""
    found = []
    for summary in client.api.images(filters={"label": labels}):
        try:
            found.append(client.images.get(summary["Id"]))
        except docker.errors.ImageNotFound:
            continue
    return found


def remove_labelled_images(client: docker.DockerClient) -> int:
    """`specgate clean --images`: every image specgate built; returns how many went."""
    removed = 0
    for image in labelled_images(client, LABEL):
        try:
            client.images.remove(image.id, force=True)
            removed += 1
        except docker.errors.ImageNotFound:  # removed meanwhile (e.g. with an image it was built on)
            continue
    return removed


def prune_sim_images(client: docker.DockerClient, say: Progress) -> list[str]:
    """Remove simulator images (ours: labelled) that the current code no longer builds."""
    keep = {sim_base_tag(), f"{SIM_REPO}:{sim_context(sim_base_tag()).content_hash()}"}
    removed = []
    for kind in ("sim", "sim-base"):  # the sim images first: they sit on a base
        for image in labelled_images(client, [f"{LABEL}=1", f"{KIND_LABEL}={kind}"]):
            for tag in image.tags:
                if tag not in keep:
                    try:
                        client.images.remove(tag)
                    except docker.errors.APIError as exc:  # e.g. a container still uses it
                        say(f"{tag}: kept ({_few_words(exc)})")
                        continue
                    removed.append(tag)
                    say(f"{tag}: removed")
    return removed


# ----------------------------------------------------------------------- helpers
def _build_args(build_cfg: BuildConfig) -> dict[str, str]:
    return {str(k): str(v) for k, v in build_cfg.build_args.items()}


def _required_image(build_cfg: BuildConfig) -> str:
    if not build_cfg.image:
        raise ImageError(f"build.image is not set; build.kind={build_cfg.kind} needs a release image tag (build.image)")
    return str(build_cfg.image)


def _split_ref(ref: str) -> tuple[str, str]:
    """`repo[:tag]` → (repo, tag); a registry port (`host:5000/repo`) is not a tag."""
    if "@" in ref:
        repository, digest = ref.split("@", 1)
        return repository, digest
    head, sep, tail = ref.rpartition(":")
    if sep and "/" not in tail:
        return head, tail
    return ref, "latest"


def _local(client: docker.DockerClient, ref: str):
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as exc:
        raise ImageError(f"the Docker engine failed to look up {ref} ({_few_words(exc)})") from None


def _info(tag: str, image, built: bool) -> ImageInfo:
    digests = image.attrs.get("RepoDigests") or []
    return ImageInfo(tag=tag, id=image.id, digest=digests[0] if digests else None, built=built)


def _read_list(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines() if line.split("#", 1)[0].strip()]


def _few_words(exc: BaseException) -> str:
    """An engine/registry error in a few words (no HTTP URL, no status-code preamble)."""
    text = getattr(exc, "explanation", None) or str(exc)
    text = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
    # A connection failure: requests wraps urllib3 wraps the OS error; keep the OS error.
    errno = re.search(r"\[Errno -?\d+\] ([^'\"()]+)|Error\(-?\d+, '([^']+)'\)", text)
    if errno:
        return (errno.group(1) or errno.group(2)).strip()
    text = re.sub(r'^(Get|Head|Post) "[^"]*":\s*', "", text)
    text = re.sub(r"\(\"(.*)\"\)$", r"\1", text)
    text = text.rstrip(".")
    return text if len(text) <= 120 else "..." + text[-117:]


# ----------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.servers.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--docker-host", default=None, help="the engine (default: DOCKER_HOST or the local socket)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build-sim", help="build (or reuse) the simulator's base and server images")
    sub.add_parser("sim-tag", help="print the simulator image's tag, building nothing")
    sub.add_parser("prune-sim", help="remove simulator images that the current code no longer builds")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(f"images: {line}", file=sys.stderr, flush=True)

    try:
        client = docker_client(args.docker_host)
        if args.command == "sim-tag":
            print(f"{SIM_REPO}:{sim_context(sim_base_tag()).content_hash()}")
            return 0
        if args.command == "prune-sim":
            print(f"removed {len(prune_sim_images(client, say))} old simulator image tag(s)")
            return 0
        started = time.monotonic()
        base = ensure_sim_base(client, say)
        sim = build_image(sim_context(base.tag), SIM_REPO, "sim", client, say)
    except ImageError as exc:
        print(f"ERROR: specgate: {exc}", file=sys.stderr)
        return 1
    for info in (base, sim):
        size = client.images.get(info.id).attrs.get("Size", 0) / 1e6
        print(f"{info.tag}: {'built' if info.built else 'reused'} ({info.id[7:19]}, {size:.0f} MB)")
    print(f"sim images ready in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
