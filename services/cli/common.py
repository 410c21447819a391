"""What every `yantra` command shares: the one-line error, settings, the bus, argument types."""

from __future__ import annotations

import argparse

from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.js.errors import APIError, ServiceUnavailableError
from pydantic import ValidationError

from services.core import events as ev
from services.core.bus import Bus, BusUnavailable, connect_plain
from services.core.nats_security import TlsSettingError, tls_failed, tls_failure_line
from services.core.secrets_env import SecretFileError
from services.core.settings import Settings, auth_refused, redact_url, settings_problem
from services.core.stack import StackError, check_data_dir, resolve_nats_url, running_stack
from services.core.stack_secure import SecureStackError, client_settings
from services.core.stream_read import ShortRead
from services.core.streams import out_of_storage
from services.server.models import PRESETS  # names only: torch loads when a model does


class CliError(RuntimeError):
    """An error the user can act on: printed as one line, exit code 2."""


def settings_of(args: argparse.Namespace, *, client: bool = True) -> Settings:
    """The settings a command runs with (environment, then its options); CliError when they cannot work,
    so a data dir that is a file, say, is one line for every command rather than a traceback in each.

    `client` (every command but `up` and `demo`, which start a stack): with NATS_URL unset and a `yantra up --secure`
    running on the data dir, its URL, CA and the yantra-cli user, found through stack.json as the URL is
    (stack_secure.client_settings); the URL is then the one it had when the command started."""
    try:
        settings = Settings.from_env(
            data_dir=getattr(args, "data_dir", None),
            model=getattr(args, "model", None),
            device=getattr(args, "device", None),
            graphs=False if getattr(args, "no_graphs", False) else None,
            batch=getattr(args, "batch", None),
            nats_port=getattr(args, "nats_port", None),
        )
    except ValidationError as exc:
        raise CliError(f"invalid settings: {settings_problem(exc)}") from None
    except SecretFileError as exc:  # a NAME_FILE that gives no secret; it names the file, never a value
        raise CliError(f"invalid settings: {exc}") from None
    try:
        check_data_dir(settings.data_dir)
    except StackError as exc:
        raise CliError(str(exc)) from None
    if not client:
        return settings
    stack_info = running_stack(settings.data_dir)
    replicas = (stack_info or {}).get("nats_replicas")
    if settings.nats_replicas is None and not settings.nats_url and isinstance(replicas, int) and replicas > 0:
        settings = settings.model_copy(update={"nats_replicas": replicas})  # `yantra up --cluster N`'s streams
    try:
        return client_settings(settings, stack_info)
    except SecureStackError as exc:  # its password file, another user's say: it names the file, never the value
        raise CliError(f"the stack on {settings.data_dir} requires a user and TLS: {exc}") from None


# JetStream's answers that mean it is not there to answer: off (a disk that filled disables it), or not enabled.
_JS_UNAVAILABLE_CODES = (503,)
_JS_NOT_ENABLED = (10039, 10076)
# "insufficient resources" (its store at its limit, or its disk full: a 503 too) and "insufficient storage"
_JS_UNAVAILABLE_HINT = (
    "JetStream is unavailable on that NATS server (a disk holding its store that fills turns JetStream, or the"
    " stream it could not write, off until nats-server restarts: free some space; `yantra up` then restarts its"
    " embedded nats-server by itself)"
)


def nats_problem(exc: BaseException) -> str | None:
    """A NATS or JetStream error in one line, with what it most likely means; None when `exc` is not one."""
    if isinstance(exc, ShortRead):
        return f"{exc} (the log was not read whole: try again)"
    if isinstance(exc, ServiceUnavailableError) and not exc.description:
        # nats-py's word for "no responders" on a JetStream request: nothing serves JetStream's API there
        return f"JetStream did not answer (no responders); {_JS_UNAVAILABLE_HINT}"
    if isinstance(exc, APIError):
        what = f"{exc.description or type(exc).__name__}" + (f" (error {exc.err_code})" if exc.err_code else "")
        if out_of_storage(exc.err_code, exc.description):
            return (
                f"JetStream refused the request: {what}; its store is full (its disk, or the server's"
                " max_file_store): free some space"
            )
        if exc.code in _JS_UNAVAILABLE_CODES or exc.err_code in _JS_NOT_ENABLED:
            return f"JetStream refused the request: {what}; {_JS_UNAVAILABLE_HINT}"
        return f"JetStream refused the request: {what}"
    if isinstance(exc, NoRespondersError):
        return f"JetStream did not answer (no responders); {_JS_UNAVAILABLE_HINT}"
    if isinstance(exc, TimeoutError) and isinstance(exc, NatsError):
        return f"NATS did not answer in time; {_JS_UNAVAILABLE_HINT}"
    if isinstance(exc, NatsError):
        return f"NATS: {str(exc).strip() or type(exc).__name__}"
    return None


async def open_bus(settings: Settings) -> Bus:
    try:
        url = resolve_nats_url(settings)
    except StackError as exc:
        raise CliError(f"{exc}. Start the stack with `yantra up` or set NATS_URL.") from exc
    try:
        auth, tls = settings.nats_auth(), settings.nats_tls()
        return await Bus.connect(
            url, name="yantra-cli", timeout=3.0, auth=auth, tls=tls, replicas=settings.nats_replicas
        )
    except BusUnavailable as exc:
        if auth_refused(exc.__cause__):
            raise CliError(f"{exc}; {settings.nats_auth_hint()}") from exc
        if not str(exc).startswith("cannot reach NATS"):  # a TLS refusal says what to set; no stack to start
            raise CliError(str(exc)) from exc
        raise CliError(f"{exc}. Start the stack with `yantra up` or set NATS_URL.") from exc
    except NatsError as exc:  # the streams could not be made or read: JetStream said no
        raise CliError(f"NATS at {redact_url(url)}: {nats_problem(exc)}") from exc


async def check_credential(settings: Settings) -> None:
    """CliError, in one line, when the NATS server a reader (the TUI) would use refuses this client's credential;
    nothing when it accepts it, or cannot be reached (the reader shows that, and waits for it). It writes
    nothing, unlike open_bus, which makes the streams."""
    try:
        url = resolve_nats_url(settings)
    except StackError:
        return
    tls = settings.nats_tls()
    try:
        nc = await connect_plain(
            url, "yantra-credential-check", 3.0, auth=settings.nats_auth(), reconnect=False, tls=tls
        )
    except TlsSettingError as exc:
        raise CliError(f"cannot speak TLS to NATS at {redact_url(url)}: {exc}") from exc
    except Exception as exc:
        if auth_refused(exc):
            raise CliError(
                f"NATS refused the connection at {redact_url(url)}: authorization violation; "
                f"{settings.nats_auth_hint()}"
            ) from exc
        if tls_failed(exc):  # its certificate cannot be verified (no NATS_CA): waiting would not change that
            raise CliError(tls_failure_line(url, tls, exc)) from exc
        return
    await nc.close()


def run_id_arg(text: str) -> str:
    try:
        return ev.check_run_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def bounded(low: int, high: int):
    """An argparse type: an integer in [low, high] (the server refuses others, which would stall a run)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return parse


def add_common(sp: argparse.ArgumentParser, model: bool = False) -> None:
    sp.add_argument(
        "--data-dir",
        metavar="DIR",
        help="where the embedded stack keeps its state (default .yantra, or YANTRA_DATA_DIR)",
    )
    if model:
        sp.add_argument(
            "--model",
            metavar="NAME",
            help=f"preset ({', '.join(PRESETS)}; random weights), local path or hub id"
            " (default tiny-qwen2, or YANTRA_MODEL)",
        )
        sp.add_argument(
            "--device",
            choices=["auto", "cpu", "cuda"],
            help="serving device (default auto: cuda when a GPU is visible)",
        )
        sp.add_argument(
            "--no-graphs",
            action="store_true",
            help="decode steps run eagerly, not as CUDA graphs (or YANTRA_GRAPHS=0); serves kernels never"
            " captured in a graph",
        )
        sp.add_argument(
            "--batch",
            type=bounded(0, 256),
            metavar="N",
            help="requests decoded together in one step (default 64 on a GPU, 8 on a CPU, or YANTRA_BATCH;"
            " 0: each request alone)",
        )


def add_nats_port(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--nats-port",
        type=bounded(1, 65535),
        metavar="PORT",
        help="port of the embedded nats-server on 127.0.0.1 (or YANTRA_NATS_PORT); default: the port this data"
        " dir's last `yantra up` used, kept in DIR/nats.port, or a free one the first time (or when that one is"
        " taken, which it says); with NATS_URL set there is no embedded server",
    )
