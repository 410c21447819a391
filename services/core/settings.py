"""Settings shared by every process, read from the environment (YANTRA_*, NATS_URL, NATS_USER, ...).

Over 400 lines, one file: one table of every setting (its variable, default, bounds and description) and the
checks across them; split, a user's one place to read would be several.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from services.core.retry import ELECTION_RETRY_S
from services.core.secrets_env import with_file_secrets

# The environment variable each setting is read from: error messages name it, since that is what a user set.
ENV_NAMES = {
    "nats_url": "NATS_URL",
    "nats_user": "NATS_USER",
    "nats_password": "NATS_PASSWORD",
    "nats_token": "NATS_TOKEN",
    "nats_ca": "NATS_CA",
    "nats_cert": "NATS_CERT",
    "nats_key": "NATS_KEY",
    "nats_port": "YANTRA_NATS_PORT",
    "nats_replicas": "YANTRA_NATS_REPLICAS",
    "nats_retry_s": "YANTRA_NATS_RETRY_S",
    "data_dir": "YANTRA_DATA_DIR",
    "server_addr": "YANTRA_SERVER_ADDR",
    "model": "YANTRA_MODEL",
    "device": "YANTRA_DEVICE",
    "ack_wait_s": "YANTRA_ACK_WAIT_S",
    "shutdown_grace_s": "YANTRA_SHUTDOWN_GRACE_S",
    "log_level": "YANTRA_LOG_LEVEL",
    "restore_swaps": "YANTRA_RESTORE_SWAPS",
    "admin_token": "YANTRA_ADMIN_TOKEN",
    "instance_id": "YANTRA_INSTANCE_ID",
    "metrics_addr": "YANTRA_METRICS_ADDR",
    "http_addr": "YANTRA_HTTP_ADDR",
    "weaviate_url": "WEAVIATE_URL",
    "max_requests": "YANTRA_MAX_REQUESTS",
    "graphs": "YANTRA_GRAPHS",
    "packed_gqa": "YANTRA_PACKED_GQA",
    "batch": "YANTRA_BATCH",
    "switch_interval_ms": "YANTRA_SWITCH_INTERVAL_MS",
    "prefill_groups": "YANTRA_PREFILL_GROUPS",
    "shadow_calls": "YANTRA_SHADOW_CALLS",
    "llm_model": "YANTRA_LLM_MODEL",
    "llm_base_url": "YANTRA_LLM_BASE_URL",
    "llm_max_calls": "YANTRA_LLM_MAX_CALLS",
    "llm_max_tokens": "YANTRA_LLM_MAX_TOKENS",
    "llm_answer_tokens": "YANTRA_LLM_ANSWER_TOKENS",
    "llm_timeout_s": "YANTRA_LLM_TIMEOUT_S",
    "llm_retries": "YANTRA_LLM_RETRIES",
}
# Set to "" these mean unset (the field's default); the others take "" as given (and may refuse it).
_EMPTY_IS_UNSET = frozenset({"nats_url", "nats_port", "nats_replicas", "nats_retry_s", "batch", "shadow_calls"})
# On/off settings: "0", "false" and "no" are off, anything else on.
_FLAGS = frozenset({"restore_swaps", "graphs", "packed_gqa"})
# Never echoed in an error message: a typo there must not print the secret.
SECRET_FIELDS = frozenset({"nats_password", "nats_token", "admin_token"})


def host_port_problem(addr: str) -> str | None:
    """Why `addr` is not a "host:port" a client can connect to, in a few words; None when it is one.

    Port 0 is refused: it asks the OS for any port, and then no client knows which one to call.
    """
    host, sep, port = addr.rpartition(":")
    if not sep or not host.strip("[]"):
        return "not a host:port address (e.g. 127.0.0.1:50551)"
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return "an IPv6 host goes in brackets (e.g. [::1]:50551)"
    if not port.isdigit():
        return f"the port {port!r} is not a number"
    if not 1 <= int(port) <= 65535:
        return f"the port {int(port)} is outside 1..65535"
    return None


def is_loopback(host: str) -> bool:
    """Whether `host` (an address's host, brackets or not) is this machine's loopback alone. A name other than
    localhost is not: it may resolve to any interface, and is judged as if it did."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS_URL: one URL, or several separated by commas (the nodes of a cluster), as nats-py
    takes them (a list; a string with commas it would read as one URL)."""
    return [part.strip() for part in url.split(",") if part.strip()]


def redact_url(url: str) -> str:
    """`url` (or a comma-separated list of them) with any user, password or token in it replaced by ***: what may
    be printed or logged."""
    if "," in url:
        return ",".join(redact_url(part) for part in nats_servers(url))
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def url_has_credentials(url: str) -> bool:
    return any("@" in urlsplit(part).netloc for part in nats_servers(url))


@dataclass(frozen=True)
class NatsAuth:
    """Credentials for NATS: a token, or a user and password. repr never shows a secret."""

    token: str = field(default="", repr=False)
    user: str = ""
    password: str = field(default="", repr=False)

    def connect_options(self) -> dict[str, str]:
        """Keyword arguments for nats.connect."""
        if self.token:
            return {"token": self.token}
        return {"user": self.user, "password": self.password}


@dataclass(frozen=True)
class NatsTls:
    """How a client speaks TLS to NATS: the CA that signed the server's certificate ("": the system's CAs), and the
    client's own certificate and key, for a server that asks for one."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


class Settings(BaseModel):
    nats_url: str | None = Field(
        None, description="NATS server to use, or a cluster's, separated by commas; unset means the embedded one"
    )
    nats_user: str = Field("", description="user for an external NATS_URL without credentials of its own")
    nats_password: str = Field("", repr=False, description="password for NATS_USER")
    nats_token: str = Field("", repr=False, description="token for an external NATS_URL (instead of a user)")
    nats_ca: str = Field("", description="PEM file of the CA that signed NATS's certificate; set: TLS is required")
    nats_cert: str = Field("", description="PEM certificate this client presents to a NATS that asks for one")
    nats_key: str = Field("", description="PEM key of NATS_CERT")
    nats_port: int | None = Field(
        None, ge=1, le=65535, description="port of the embedded nats-server; unset: the data dir's, else a free one"
    )
    nats_replicas: int | None = Field(
        None, ge=1, le=5, description="replicas of each stream (a cluster's nodes); unset: the server's default, one"
    )
    nats_retry_s: float | None = Field(
        None,
        ge=0,
        description="seconds a publish or a stream set-up is retried through a JetStream leader election;"
        f" unset: {ELECTION_RETRY_S:g} on a cluster, none on one server",
    )
    data_dir: Path = Field(
        Path(".yantra"),
        validate_default=True,  # made absolute like a given one (`_absolute`), unset or not
        description="embedded NATS store, skill library, kernel files, logs",
    )
    server_addr: str = Field("127.0.0.1:50551", description="gRPC address of the inference server")
    model: str = Field("tiny-qwen2", description="preset name, local path or hub id served by the server")
    device: str = Field("auto", description="auto | cpu | cuda")
    ack_wait_s: float = Field(5.0, gt=0, description="seconds before an unacknowledged event is redelivered")
    shutdown_grace_s: float = Field(
        10.0, gt=0, description="seconds a service told to stop has to close before it exits outright"
    )
    log_level: str = "INFO"
    restore_swaps: bool = Field(True, description="a (re)started server re-applies the log's committed swaps")
    admin_token: str = Field(
        "", repr=False, description="bearer token for the server's Admin RPCs and the embedded NATS; empty: none"
    )
    instance_id: str = Field("", description="the id the server answers Health with; empty: a random one")
    metrics_addr: str = Field("", description="host:port of the server's Prometheus endpoint; empty: none")
    http_addr: str = Field("", description="host:port of the server's OpenAI-compatible HTTP API; empty: none")
    weaviate_url: str = Field(
        "", description="Weaviate holding the skill index (http://HOST:PORT); empty: the embedded JSON library"
    )
    max_requests: int = Field(64, ge=1, description="requests the server generates at once; more: RESOURCE_EXHAUSTED")
    graphs: bool = Field(True, description="on a GPU, each batched decode step is a CUDA graph (0: eager steps)")
    # transformers before 5.25 (the GPU pairing's 5.17) copies every key/value head once per query head when a mask
    # is given, and a batched decode step always has one (services.server.gqa_decode): on by default, 0 keeps it.
    packed_gqa: bool = Field(
        True, description="a decode step's grouped key/value heads attend without a copy per query head (0: copy)"
    )
    batch: int | None = Field(
        None, ge=0, description="requests decoded together (slots); unset: 64 on a GPU, 8 on a CPU; 0: one at a time"
    )
    # The server's engine thread (a decode step) and event loop (gRPC, HTTP, each tick's tokens handed to the streams)
    # share the interpreter lock: a thread that dropped it (a GPU wait, any torch op) waits for it until the other
    # drops it or this interval passes. 0.1 ms, not Python's 5: on an H200 the served sweep at 64 streams gave
    # 3,932 / 3,952 tok/s at 0.5 ms against 3,371 / 3,228 at 5 (two runs, the order swapped), then 4,561 at 0.1 ms
    # against 3,904 at 0.5 in one call (16 streams 2,146 against 1,844; the engine's tick p50 at 64 streams 10.1
    # against 12.6 ms; 1 stream 229 against 235) (bench/README.md, "The server's thread switch interval").
    switch_interval_ms: float = Field(
        0.1, gt=0, le=100, description="the server's thread switch interval (sys.setswitchinterval), in ms"
    )
    # A burst of joins (a level's start: every stream at once) is one eager prefill past the prefill graphs' 4
    # prompts, host-bound (~25-30 ms on the H200 in process, longer beside a busy event loop); up to this many
    # groups of 4 replay prefill graphs instead; 1: one eager join. 4 (services.server.batch_decode.PREFILL_GROUPS):
    # bench/prefill_joins.py on the H200 had graph groups beat the eager join up to 16 prompts and lose past them.
    prefill_groups: int = Field(
        4, ge=1, le=64, description="a join of more prompts than one prefill graph holds: up to this many graph replays"
    )
    shadow_calls: int = Field(
        256,
        ge=0,
        description="after each swap, live calls of the swapped op checked against its module's own forward"
        " (then the first call of each new size, and samples); 0: only those",
    )
    # The LLM kernel author (a run's `--author gemini|openai-compatible`; docs/authors.md). Its API key is read from
    # GEMINI_API_KEY / OPENAI_API_KEY by the coder alone, never held here, logged or recorded.
    llm_model: str = Field("", description="model the LLM author asks; empty: the provider's default")
    llm_base_url: str = Field("", description="base URL of the LLM API; empty: the provider's own")
    llm_max_calls: int = Field(12, ge=0, description="HTTP requests a run's LLM author may make, retries included")
    # (out of repr, which tests hold free of secret-looking words such as "tok": nothing secret in them)
    llm_max_tokens: int = Field(300_000, ge=0, repr=False, description="prompt + answer tokens a run may spend")
    llm_answer_tokens: int = Field(8192, ge=256, repr=False, description="the most tokens one answer may take")
    llm_timeout_s: float = Field(120.0, gt=0, description="seconds one LLM request may take")
    llm_retries: int = Field(2, ge=0, le=5, description="retries of one request after a 429, a 5xx or a timeout")

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        # Services hand paths to children that run in other working directories (the judge's sandbox).
        return path.expanduser().resolve()

    @field_validator("server_addr", "metrics_addr", "http_addr")
    @classmethod
    def _host_port(cls, addr: str, info) -> str:
        # gRPC and the Prometheus exporter take a port past 65535 modulo 65536 (99999 listens on 34463), while
        # `yantra up` says it is ready on the address as written: refuse it here, before anything starts.
        if info.field_name in ("metrics_addr", "http_addr") and not addr:
            return addr  # no endpoint
        problem = host_port_problem(addr)
        if problem:
            raise ValueError(f"{ENV_NAMES[info.field_name]}={addr}: {problem}")
        return addr

    @field_validator("nats_url")
    @classmethod
    def _nats_urls(cls, url: str | None) -> str | None:
        if url is not None and not nats_servers(url):
            raise ValueError(f"NATS_URL={url!r}: names no server (nats://HOST:PORT, several separated by commas)")
        return url

    @field_validator("nats_ca", "nats_cert", "nats_key")
    @classmethod
    def _readable_file(cls, path: str, info) -> str:
        # Checked here, so a process with a typo'd path stops at start in one line, not at its first connection;
        # made absolute like data_dir, for children that run in other working directories.
        if not path:
            return path
        resolved = Path(path).expanduser().resolve()
        if not resolved.is_file():
            raise ValueError(f"{ENV_NAMES[info.field_name]}={path}: no such file")
        if not os.access(resolved, os.R_OK):
            raise ValueError(f"{ENV_NAMES[info.field_name]}={path}: this user cannot read it")
        return str(resolved)

    @field_validator("weaviate_url")
    @classmethod
    def _http_url(cls, url: str, info) -> str:
        if not url:
            return url  # the embedded index
        try:
            parts = urlsplit(url)
            port = parts.port  # a port that is not a number, or past 65535, is a ValueError here
        except ValueError:
            parts, port = None, None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
            raise ValueError(f"{ENV_NAMES[info.field_name]}={redact_url(url)}: not an http(s)://HOST:PORT URL")
        return url

    @model_validator(mode="after")
    def _user_needs_password(self) -> Settings:
        if bool(self.nats_user) != bool(self.nats_password):
            raise ValueError("NATS_USER and NATS_PASSWORD go together: set both, or neither")
        if bool(self.nats_cert) != bool(self.nats_key):
            raise ValueError("NATS_CERT and NATS_KEY go together: set both, or neither")
        return self

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """The settings the environment gives, then `overrides`; a secret may come from a file (NAME_FILE, see
        services.core.secrets_env: SecretFileError, one line, when it cannot)."""
        env = with_file_secrets(os.environ)
        values: dict[str, object] = {}
        for name, var in ENV_NAMES.items():  # unset: the field's default
            raw = env.get(var)
            if raw is None or (raw == "" and name in _EMPTY_IS_UNSET):
                continue
            values[name] = raw not in ("0", "false", "no") if name in _FLAGS else raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def env(self) -> dict[str, str]:
        """The same settings as environment variables, for child processes."""
        out = {
            "YANTRA_DATA_DIR": str(self.data_dir),
            "YANTRA_SERVER_ADDR": self.server_addr,
            "YANTRA_MODEL": self.model,
            "YANTRA_DEVICE": self.device,
            "YANTRA_ACK_WAIT_S": str(self.ack_wait_s),
            "YANTRA_SHUTDOWN_GRACE_S": str(self.shutdown_grace_s),
            "YANTRA_LOG_LEVEL": self.log_level,
            "YANTRA_RESTORE_SWAPS": "1" if self.restore_swaps else "0",
        }
        if self.nats_url:
            out["NATS_URL"] = self.nats_url
        for name in ("nats_user", "nats_password", "nats_token", "nats_ca", "nats_cert", "nats_key"):
            if getattr(self, name):
                out[ENV_NAMES[name]] = getattr(self, name)
        if self.nats_port is not None:
            out["YANTRA_NATS_PORT"] = str(self.nats_port)
        if self.nats_replicas is not None:
            out["YANTRA_NATS_REPLICAS"] = str(self.nats_replicas)
        if self.nats_retry_s is not None:
            out["YANTRA_NATS_RETRY_S"] = str(self.nats_retry_s)
        if self.admin_token:
            out["YANTRA_ADMIN_TOKEN"] = self.admin_token
        if self.instance_id:
            out["YANTRA_INSTANCE_ID"] = self.instance_id
        if self.metrics_addr:
            out["YANTRA_METRICS_ADDR"] = self.metrics_addr
        if self.http_addr:
            out["YANTRA_HTTP_ADDR"] = self.http_addr
        if self.weaviate_url:
            out["WEAVIATE_URL"] = self.weaviate_url
        out["YANTRA_MAX_REQUESTS"] = str(self.max_requests)
        out["YANTRA_GRAPHS"] = "1" if self.graphs else "0"
        out["YANTRA_PACKED_GQA"] = "1" if self.packed_gqa else "0"
        if self.batch is not None:
            out["YANTRA_BATCH"] = str(self.batch)
        out["YANTRA_SHADOW_CALLS"] = str(self.shadow_calls)
        out["YANTRA_SWITCH_INTERVAL_MS"] = str(self.switch_interval_ms)
        out["YANTRA_PREFILL_GROUPS"] = str(self.prefill_groups)
        for name in ("llm_model", "llm_base_url", "llm_max_calls", "llm_max_tokens", "llm_answer_tokens"):
            out[ENV_NAMES[name]] = str(getattr(self, name))
        out["YANTRA_LLM_TIMEOUT_S"], out["YANTRA_LLM_RETRIES"] = str(self.llm_timeout_s), str(self.llm_retries)
        return out

    def nats_auth(self) -> NatsAuth | None:
        """The credentials to connect to NATS with; None: none (or those in NATS_URL, which nats-py reads itself).

        The embedded nats-server (NATS_URL unset) requires YANTRA_ADMIN_TOKEN when one is set, so that the
        bus, which carries rollbacks and run requests, needs the credential the server's Admin reads need.
        An external server takes what NATS_URL carries, else NATS_TOKEN, else NATS_USER and NATS_PASSWORD.
        """
        if not self.nats_url:
            return NatsAuth(token=self.admin_token) if self.admin_token else None
        env = {"NATS_TOKEN": self.nats_token, "NATS_USER": self.nats_user, "NATS_PASSWORD": self.nats_password}
        return env_nats_auth(self.nats_url, env)

    def nats_tls(self) -> NatsTls | None:
        """How to speak TLS to NATS; None: only as a server asks (then with the system's CAs)."""
        if not (self.nats_ca or self.nats_cert):
            return None
        return NatsTls(self.nats_ca, self.nats_cert, self.nats_key)

    def nats_auth_hint(self) -> str:
        """What to set when NATS refuses this client's credentials."""
        if not self.nats_url:
            if self.admin_token:
                return "YANTRA_ADMIN_TOKEN is not the token the stack was started with; set it to that one"
            return "the stack requires a credential: set YANTRA_ADMIN_TOKEN to the token it was started with"
        return (
            "give its credentials in NATS_URL (nats://USER:PASSWORD@HOST:PORT), NATS_USER and NATS_PASSWORD,"
            " or NATS_TOKEN"
        )


def settings_problem(exc: ValidationError) -> str:
    """A ValidationError of Settings in one line, naming the environment variable of each bad value."""
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "value_error":  # our own validators' messages name the variable already
            problems.append(str(error["ctx"]["error"]))
            continue
        var = ENV_NAMES.get(name, name or "settings")
        shown = "" if name in SECRET_FIELDS else f"={error['input']}"
        problems.append(f"{var}{shown}: {error['msg']}")
    return "; ".join(problems)


def env_nats_auth(url: str, env: dict[str, str] | None = None) -> NatsAuth | None:
    """The credentials the environment gives for `url`: NATS_TOKEN, else NATS_USER and NATS_PASSWORD; none when
    the URL carries its own (nats-py reads those from it). A service started by `yantra up` gets the embedded
    server's credential this way."""
    env = with_file_secrets(os.environ, ("NATS_PASSWORD", "NATS_TOKEN")) if env is None else env
    if url_has_credentials(url):
        return None
    if env.get("NATS_TOKEN"):
        return NatsAuth(token=env["NATS_TOKEN"])
    if env.get("NATS_USER") or env.get("NATS_PASSWORD"):
        return NatsAuth(user=env.get("NATS_USER", ""), password=env.get("NATS_PASSWORD", ""))
    return None


def env_bus_options(env: dict[str, str] | None = None) -> tuple[int | None, float | None]:
    """(stream replicas, election retry seconds) as the environment gives them (YANTRA_NATS_REPLICAS,
    YANTRA_NATS_RETRY_S), None where unset: how a service started by `yantra up --cluster N` makes its streams with
    N replicas. A value that is not a number is unset here; Settings.from_env, which every process reads first,
    refuses it in one line."""
    env = os.environ if env is None else env
    replicas = env.get("YANTRA_NATS_REPLICAS", "")
    retry = env.get("YANTRA_NATS_RETRY_S", "")
    try:
        retry_s = float(retry) if retry else None
    except ValueError:
        retry_s = None
    replicas_n = int(replicas) if replicas.isdigit() and int(replicas) > 0 else None
    return replicas_n, (retry_s if retry_s is not None and retry_s >= 0 else None)


def auth_refused(exc: BaseException | None) -> bool:
    """Whether `exc` is a NATS server refusing the client's credentials (or their absence)."""
    if exc is None:
        return False
    return type(exc).__name__ == "AuthorizationError" or "authorization violation" in str(exc).lower()
