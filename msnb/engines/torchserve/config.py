"""TorchServe's configuration: Java check, free loopback ports, config.properties, log4j2 (KServe's: msnb.engines.kserve)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from msnb.engines.env_vars import ENV_DIR
from msnb.engines.models import Limits
from msnb.engines.store import STORE_DIR
from msnb.errors import ServerError

JAVA_MIN = 11
JAVA_HINT = (
    "install a Java runtime >= 11 (17 recommended), e.g. `sudo apt-get install openjdk-17-jre-headless` "
    "or `conda install -c conda-forge openjdk=17`, or point JAVA_HOME at one."
)
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep a margin
PORT_NAMES = ("inference", "management", "metrics", "grpc_inference", "grpc_management")
MODEL_LOG, FRONTEND_LOG = "model_log.log", "ts_log.log"  # the workers' output; the frontend's (QUIET_LOG4J2)
# Quiet logging: worker output (tracebacks, handler logging) stays in model_log.log, the frontend
# logs INFO and above to ts_log.log, access and metric logs are dropped, and only warnings reach stdout.
QUIET_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration>
  <Appenders>
    <Console name="STDOUT" target="SYSTEM_OUT"><PatternLayout pattern="%d{ISO8601} [%-5p] %c - %m%n"/></Console>
    <File name="model_log" fileName="${env:LOG_LOCATION:-logs}/model_log.log">
      <PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
    <File name="ts_log" fileName="${env:LOG_LOCATION:-logs}/ts_log.log">
      <PatternLayout pattern="%d{ISO8601} [%-5p] %t %c - %m%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="ACCESS_LOG" level="off" additivity="false"/>
    <Logger name="MODEL_METRICS" level="off" additivity="false"/>
    <Logger name="TS_METRICS" level="off" additivity="false"/>
    <Logger name="org.pytorch.serve.wlm.BatchAggregator" level="warn"/>
    <Logger name="io.netty" level="error"/>
    <Logger name="org.apache" level="off"/>
    <Logger name="MODEL_LOG" level="all" additivity="false"><AppenderRef ref="model_log"/></Logger>
    <Logger name="org.pytorch.serve" level="info" additivity="false"><AppenderRef ref="ts_log"/></Logger>
    <Root level="warn"><AppenderRef ref="STDOUT"/><AppenderRef ref="ts_log"/></Root>
  </Loggers>
</Configuration>
"""


@dataclass(frozen=True)
class Layout:
    """Where one server keeps its files (all under its workdir)."""

    workdir: Path
    store: Path | None = None  # a model store elsewhere (e.g. a KServe layout's); default: workdir/STORE_DIR

    @property
    def model_store(self) -> Path:
        return self.store or self.workdir / STORE_DIR

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def env_dir(self) -> Path:
        """The models' variables (``--env``): private to the server, outside the model store and the models."""
        return self.workdir / ENV_DIR

    @property
    def tmp_dir(self) -> Path:
        """TMPDIR/TEMP of the server: its pid file and the workers' Unix sockets (`.ts.sock.<port>`).

        A socket path longer than the kernel's limit (108 bytes) kills every worker with
        "AF_UNIX path too long"; a deep workdir then gets a short folder in /tmp named after it.
        """
        inside = self.workdir / "tmp"
        if len(str(inside / ".ts.sock.65535")) < SOCKET_PATH_MAX:
            return inside
        return Path("/tmp") / f"msnb-ts-{hashlib.sha1(str(self.workdir).encode()).hexdigest()[:12]}"

    @property
    def cancel_dir(self) -> Path:
        """Where the front marks the streams it ended early, for the workers to stop them (msnb_runtime.handler.cancel)."""
        return self.tmp_dir / "msnb-cancel"

    @property
    def pid_file(self) -> Path:
        """Where TorchServe's launcher records the Java pid ($TMPDIR/.model_server.pid)."""
        return self.tmp_dir / ".model_server.pid"

    @property
    def config(self) -> Path:
        return self.workdir / "config.properties"

    @property
    def log_config(self) -> Path:
        return self.workdir / "log4j2.xml"

    @property
    def model_log(self) -> Path:
        return self.log_dir / MODEL_LOG

    @property
    def java_out(self) -> Path:
        return self.log_dir / "java_stdout.log"

    @property
    def key_file(self) -> Path:
        return self.workdir / "key_file.json"

    def create(self) -> None:
        for path in (self.model_store, self.log_dir, self.tmp_dir, self.cancel_dir):
            path.mkdir(parents=True, exist_ok=True)


def java_executable() -> str:
    """The java TorchServe's launcher will run ($JAVA_HOME/bin/java, else java on PATH), checked >= 11."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no `java` on PATH"
        raise ServerError(f"TorchServe needs Java, but {where}.", JAVA_HINT)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ServerError(f"Could not run {java} -version: {err}.", JAVA_HINT) from None
    major = java_major(out.stderr + out.stdout)
    if major is None or major < JAVA_MIN:
        found = f"Java {major}" if major else f"an unrecognised Java ({(out.stderr or out.stdout).strip()[:80]!r})"
        raise ServerError(f"TorchServe 0.12 needs Java >= {JAVA_MIN}, but {java} is {found}.", JAVA_HINT)
    return java


def java_major(version_text: str) -> int | None:
    """Major version from `java -version` output: '1.8.0_292' -> 8, '17.0.15' -> 17."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_port(port: int, name: str) -> None:
    """Refuse a requested port another process holds (TorchServe's launcher would still return 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            raise ServerError(
                f"The {name} port {port} on 127.0.0.1 is already in use ({err.strerror}).",
                f"stop what listens there (`ss -ltnp 'sport = :{port}'`), "
                "or leave the port unset so msnb picks a free one.",
            ) from None


def choose_ports(requested: dict[str, int] | None = None) -> dict[str, int]:
    """One port per TorchServe endpoint: requested ones checked free, the rest picked free."""
    requested = dict(requested or {})
    unknown = set(requested) - set(PORT_NAMES)
    if unknown:
        raise ServerError(f"Unknown port name(s) {sorted(unknown)}.", f"ports are {', '.join(PORT_NAMES)}.")
    ports = {}
    for name in PORT_NAMES:
        if requested.get(name) is not None:
            check_port(requested[name], name)
            ports[name] = requested[name]
        else:
            ports[name] = free_port()
    return ports


# In prometheus mode TorchServe 0.12 publishes on /metrics only the metrics its metrics config declares;
# a handler's own (the shared handler's MsnbPreprocessTime, ...) stay [METRICS] lines in model_log.log
# unless auto-detection registers them on first use (measured). Auto-detection keeps TorchServe's default
# metrics config, which a metrics_config file would replace whole, and needs no second file to ship.
METRICS_PROPERTIES = {"metrics_mode": "prometheus", "model_metrics_auto_detect": "true"}
# The local server's JVM (the launcher reads `vmargs` from config.properties): a heap that starts small and is
# capped, collected by the serial collector (G1 sizes its heap to a quarter of RAM and runs GC threads beside
# the worker), only the C1 JIT (C2's compiler threads compete with the worker for the cores during the first
# minutes), and a common ForkJoinPool of two threads: TorchServe hands each request to its worker's socket with
# CompletableFuture.runAsync, which starts a new thread per request when the pool has fewer than two (the JVM's
# default on two cores: one per core less one). Measured effect of each: docs/performance.md and
# docs/openai-mcp.md; LocalServer(properties={...}) overrides any.
FORK_JOIN_THREADS = "-Djava.util.concurrent.ForkJoinPool.common.parallelism=2"
DEFAULT_VMARGS = f"-Xms32m -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 {FORK_JOIN_THREADS}"
# One Netty thread for HTTP and one for the workers' sockets (TorchServe's default, 0, means Netty's 2 per core):
# on a laptop the worker needs a core of its own more than the frontend needs threads.
FRONTEND_THREADS = {"number_of_netty_threads": 1, "netty_client_threads": 1}

ADDRESS_KEYS = (
    "inference_address",
    "management_address",
    "metrics_address",
    "grpc_inference_address",
    "grpc_management_address",
    "grpc_inference_port",
    "grpc_management_port",
)


def write_config(
    layout: Layout,
    ports: dict[str, int],
    *,
    auth: bool,
    quiet_logs: bool,
    token_expiration_min: float | None = None,
    extra: dict | None = None,
    limits: Limits | None = None,
) -> None:
    """Write config.properties (every address on 127.0.0.1) and, when quiet, the log4j2 config.

    ``extra`` properties are added (or override msnb's), except the addresses: they stay on loopback.
    """
    props = {
        "inference_address": f"http://127.0.0.1:{ports['inference']}",
        "management_address": f"http://127.0.0.1:{ports['management']}",
        "metrics_address": f"http://127.0.0.1:{ports['metrics']}",
        "grpc_inference_address": "127.0.0.1",
        "grpc_management_address": "127.0.0.1",
        "grpc_inference_port": ports["grpc_inference"],
        "grpc_management_port": ports["grpc_management"],
        "model_store": layout.model_store,
        "enable_model_api": "true",
        "disable_token_authorization": str(not auth).lower(),
        # Always on: harmless for archives without requirements, and a server restart is never needed.
        "install_py_dep_per_model": "true",
        **METRICS_PROPERTIES,
        "default_workers_per_model": 1,
        "vmargs": DEFAULT_VMARGS,
        **FRONTEND_THREADS,
    }
    if token_expiration_min is not None:
        props["token_expiration_min"] = token_expiration_min
    props.update((limits or Limits()).properties())
    props.update({k: v for k, v in (extra or {}).items() if k not in ADDRESS_KEYS})
    layout.config.write_text(render_properties(props))
    if quiet_logs:
        layout.log_config.write_text(QUIET_LOG4J2)


def render_properties(props: dict, header: str = "") -> str:
    """config.properties text: one ``key=value`` line each (values as str), after an optional comment header."""
    return header + "".join(f"{key}={value}\n" for key, value in props.items())


def parse_properties(text: str) -> dict[str, str]:
    """config.properties text as a dict (comments and blank lines skipped)."""
    props = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props
