"""Docker backend: each arm's server runs in a container of the `build` image.

The container gets the engine's launch command (entrypoint: its executable, cmd: its
arguments) and environment (`nccl/` + `server.env` + the engine's own), GPUs through a DeviceRequest, the model and drafter paths mounted
read-only, its port published on `backend.publish_host` only, and specgate's labels
(session, run, arm) so that cleanup can always find it. Its log streams into the arm's
server.log; health is polled while the container's state is watched, so a crashed server
fails at once with its exit code and last log lines.
"""

from __future__ import annotations

from pathlib import Path

import docker
import docker.errors
from docker.types import DeviceRequest, Ulimit
from harness.config.compose import remote_engine_host
from harness.config.schema import SpecgateConfig
from harness.secrets import BOOK
from harness.engines import engine_of
from harness.engines.base import DEFAULT_IMAGE_PYTHON, Launch
from harness.servers.images import ImageError, ImageInfo, docker_client, ensure_image
from harness.servers.base import Server, ServerError
from harness.servers.labels import Session, container_labels
from harness.servers.log import ServerLog
from harness.servers.ports import free_port
from harness.servers.processes import INSPECT_SCRIPT, ServerProcess, parse_inspection

CONTAINER_PORT = 30000  # inside the container; docker picks the host side


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def client_host(docker_host: str | None, publish_host: str) -> str:
    """Where this machine reaches a published port. A specific publish address is used as
    it is (the remote box's own address, or loopback when the engine is local or on this
    machine); an all-interfaces publish (0.0.0.0) is reached at the engine's host name."""
    remote = remote_engine_host(docker_host)
    if publish_host not in ("0.0.0.0", "", "::"):
        return publish_host
    return remote or "127.0.0.1"


def unreachable_publish(docker_host: str | None, publish_host: str) -> str | None:
    """Why this machine could not reach a port published on `publish_host` of the engine at
    `docker_host`, or None: a remote engine's loopback is that box's own."""
    remote = remote_engine_host(docker_host)
    if remote and remote not in LOOPBACK and publish_host in LOOPBACK:
        return (f"backend.publish_host {publish_host} publishes the server on {remote}'s own loopback, which "
                f"this machine cannot reach; set backend.publish_host=0.0.0.0 (every interface of {remote}) "
                f"or to an address of {remote} that this machine reaches")
    return None


def device_requests(cfg: SpecgateConfig) -> list[DeviceRequest]:
    if cfg.server.gpus is not None:
        return [DeviceRequest(device_ids=[str(g) for g in cfg.server.gpus], capabilities=[["gpu"]])]
    if cfg.server.requires_gpu:
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return []


def read_only_mounts(cfg: SpecgateConfig) -> dict[str, dict[str, str]]:
    """Model and drafter checkpoints at the same path inside, read-only (absolute paths
    only: the simulator's model path is just a name). On a remote engine the paths are the
    engine's machine's, so they cannot be checked from here."""
    paths = [cfg.server.model_path, cfg.drafter.model_path if cfg.drafter.algorithm else None]
    remote = remote_engine_host(cfg.backend.docker_host) is not None  # the paths are the engine's box's
    return {p: {"bind": p, "mode": "ro"} for p in paths
            if p and Path(p).is_absolute() and (remote or Path(p).exists())}


def venv_site_packages(python: str, image_python: str) -> Path:
    """<venv>/lib/<image_python>/site-packages of a venv's `bin/python` (symlinks resolved:
    the real path is what gets mounted). The python itself is not resolved: in a venv it
    links to the base interpreter, elsewhere."""
    version = Path(image_python).name
    path = (Path(python).absolute().parent.parent / "lib" / version / "site-packages").resolve()
    if not path.is_dir():
        raise ServerError(f"build.python {python}: no {path}; the image runs {version}, so the venv "
                          f"must be one (`make install` sets up the venvs it uses)")
    return path


def host_venv_mounts(cfg: SpecgateConfig) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """(volumes, environment) that bring the engine in from the host, when the image has none.

    build.kind host_venv: the image is only Debian with the right python3 and the engine's
    C libraries (images.ensure_host_venv_image); the engine, torch and the rest are the host
    venv's site-packages (gigabytes, which an image would copy on every build), mounted
    read-only at the same path and put on PYTHONPATH. Other kinds carry their engine."""
    if cfg.build.kind != "host_venv":
        return {}, {}
    path = str(venv_site_packages(cfg.build.python, cfg.build.image_python or DEFAULT_IMAGE_PYTHON))
    return {path: {"bind": path, "mode": "ro"}}, {"PYTHONPATH": path}


class DockerServer(Server):
    def __init__(self, name: str, cfg: SpecgateConfig, log_path: Path, session: Session, scrub=None):
        super().__init__(name, log_path, scrub)
        self.cfg = cfg
        self.session = session
        self.client: docker.DockerClient | None = None
        self.container = None
        self.image: ImageInfo | None = None
        # backend.network=host: the container on the host's network, listening on a free host
        # port of its own (a multi-node server's nodes meet on loopback: harness/servers/nodes.py)
        self.host_network = cfg.backend.network == "host"
        self.port = (cfg.server.port or free_port(cfg.server.host)) if self.host_network else CONTAINER_PORT

    def environment(self) -> dict[str, str]:
        return {**engine_of(self.cfg).environment(self.cfg), **host_venv_mounts(self.cfg)[1]}

    def engine_launch(self) -> Launch:
        # inside the container the server listens on all interfaces, behind its published port;
        # on the host's network, on the host's loopback at its own port
        host = self.cfg.server.host if self.host_network else "0.0.0.0"
        return engine_of(self.cfg).launch(self.cfg, self.port, host=host, in_container=True)

    def run_kwargs(self) -> dict:
        backend = self.cfg.backend
        launch = self.engine_launch()
        kwargs = dict(
            image=self.image.tag,
            entrypoint=launch.executable,
            command=launch.args,
            detach=True,
            init=True,  # a real init as PID 1: forwards docker stop's SIGTERM and reaps orphaned workers
            environment=self.environment(),
            labels=container_labels(self.session, self.name),
            volumes={**read_only_mounts(self.cfg), **host_venv_mounts(self.cfg)[0]},
            device_requests=device_requests(self.cfg),
            name=f"specgate-{self.session.id}-{self.name}",
        )
        if self.host_network:
            kwargs["network_mode"] = "host"
        else:
            kwargs["ports"] = {f"{CONTAINER_PORT}/tcp": (backend.publish_host, None)}
        shm_size = backend.shm_size or engine_of(self.cfg).shm_size(self.cfg)
        if shm_size:
            kwargs["shm_size"] = shm_size
        if backend.ipc_host:
            kwargs["ipc_mode"] = "host"
        if backend.ulimits:
            kwargs["ulimits"] = [Ulimit(name=k, soft=int(v), hard=int(v)) for k, v in backend.ulimits.items()]
        return kwargs

    def start(self) -> None:
        self.launch()
        self.await_ready()

    def launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client = docker_client(self.cfg.backend.docker_host)
            self.image = ensure_image(self.cfg.build, self.client)
        except ImageError as exc:
            raise ServerError(f"arm '{self.name}': {exc}") from None
        try:
            # the secrets' values, behind fingerprints everywhere else, go to the container only
            kwargs = self.run_kwargs()
            kwargs.update({key: BOOK.reveal(kwargs[key]) for key in ("entrypoint", "command", "environment")})
            self.container = self.client.containers.run(**kwargs)
        except docker.errors.APIError as exc:
            raise ServerError(f"arm '{self.name}': the engine refused to start the container: "
                              f"{exc.explanation or exc}") from None
        try:
            self.follow_logs()
            self.base_url = (f"http://{self.cfg.server.host}:{self.port}" if self.host_network else
                             f"http://{client_host(self.cfg.backend.docker_host, self.cfg.backend.publish_host)}:{self.host_port()}")
        except docker.errors.NotFound:  # removed under us (`specgate clean`, another session's cleanup): one sentence
            raise ServerError(f"arm '{self.name}': its container {self.container.name} was removed by something else "
                              f"before it was ready (`specgate clean`, or another run's cleanup of dead sessions?)") from None

    def await_ready(self) -> None:
        self.wait_ready(engine_of(self.cfg).readiness().with_startup_timeout(self.cfg.backend.startup_timeout_s))

    def describe(self) -> dict:
        info = {"base_url": self.base_url, "docker_host": self.cfg.backend.docker_host,
                "command": self.engine_launch().argv}
        if self.image is not None:
            info["image"] = {"tag": self.image.tag, "id": self.image.id, "digest": self.image.digest,
                             "built_now": self.image.built,
                             **({"commit": self.image.commit} if self.image.commit else {})}
        if self.container is not None:
            info["container"] = self.container.name
        return info

    def gpu_ids(self) -> list[str] | None:
        return [str(g) for g in self.cfg.server.gpus] if self.cfg.server.gpus is not None else None

    def host_port(self) -> int:
        self.container.reload()
        bindings = self.container.attrs["NetworkSettings"]["Ports"].get(f"{CONTAINER_PORT}/tcp") or []
        if not bindings:
            raise self.failure(f"arm '{self.name}': the container {self.exit_description()} before its port was published")
        return int(bindings[0]["HostPort"])

    def follow_logs(self) -> None:
        """Copy the container's output into server.log as it comes, line by line through
        the redaction policy (a daemon thread; the stream ends when the container stops)."""
        log = ServerLog(self.log_path, self.scrub)
        self.log_thread = log.follow(self.container.logs(stream=True, follow=True), f"logs-{self.name}")

    def state(self) -> dict:
        try:
            self.container.reload()
            return self.container.attrs.get("State", {})
        except docker.errors.NotFound:
            return {"Status": "removed"}
        except docker.errors.APIError:
            return {}

    def is_alive(self) -> bool:
        return self.container is not None and self.state().get("Status") == "running"

    def exit_description(self) -> str:
        state = self.state()
        if state.get("Status") == "running":
            return "is still running"
        if state.get("OOMKilled"):
            return "was killed for lack of memory (OOM)"
        return f"exited with code {state.get('ExitCode', 'unknown')}"

    def processes(self) -> list[ServerProcess]:
        result = self.container.exec_run(["sh", "-c", INSPECT_SCRIPT], demux=True)
        stdout, stderr = result.output
        if result.exit_code != 0:
            raise ServerError(f"arm '{self.name}': cannot list the container's processes: "
                              f"{(stderr or stdout or b'').decode(errors='replace').strip()}")
        return parse_inspection(stdout.decode())

    def stop(self) -> None:
        if self.container is None:
            return
        try:
            self.container.stop(timeout=int(self.cfg.backend.shutdown_timeout_s))
        except docker.errors.APIError:
            pass
        if self.log_thread is not None:
            self.log_thread.join(timeout=5)
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise ServerError(f"arm '{self.name}': could not remove container {self.container.name}: {exc}") from None
        self.container = None
