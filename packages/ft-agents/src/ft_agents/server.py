"""The server a harness talks to: found at a URL (``/v1/models`` gives the model id and context length),
or started as ``ft serve --model PATH`` in the background and stopped when the launch ends.

Any OpenAI/Anthropic-compatible server works (ft, vLLM, SGLang, ...): only ``GET /v1/models`` is read."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from ft_agents import variables
from ft_agents.errors import AgentsError

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "FT_SERVER_URL"
FALLBACK_CONTEXT = (
    32768  # when a server does not report its context length (and --context-length is absent)
)
_CONTEXT_FIELDS = ("context_length", "max_model_len", "context_window", "max_context_length")


@dataclass(frozen=True)
class ServerInfo:
    url: str  # scheme://host:port[/prefix], without /v1 and without a trailing slash
    model_id: str
    context_length: int
    context_reported: bool = True  # False: FALLBACK_CONTEXT or an estimate, not the server's number

    @property
    def openai_url(self) -> str:
        """Base URL for OpenAI-style clients (they append /chat/completions, /responses)."""
        return self.url + "/v1"


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url[:-3] if url.endswith("/v1") else url


def default_url() -> tuple[str, str]:
    """(URL, where it came from) when --server is not given."""
    if url := variables.text(URL_ENV):
        return normalize_url(url), f"${URL_ENV}"
    return DEFAULT_URL, "the default address"


class Unreachable(AgentsError):
    """No HTTP server answers at the URL (refused, timed out, unknown host)."""


def _get(url: str, api_key: str | None, timeout: float) -> dict:
    headers = {"Accept": "application/json"}
    if api_key:
        headers |= {"Authorization": f"Bearer {api_key}", "x-api-key": api_key}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=timeout
        ) as r:
            return json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        body = e.read()[:300].decode("utf-8", "replace")
        if e.code in (401, 403):
            raise AgentsError(
                f"GET {url} was refused ({e.code}): the server needs an API key: "
                "pass --api-key KEY or set $FT_API_KEY"
            ) from None
        raise AgentsError(f"GET {url} answered {e.code}: {body}") from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(str(getattr(e, "reason", e))) from None
    except ValueError:
        raise AgentsError(
            f"GET {url} did not answer JSON: is this an OpenAI-compatible server?"
        ) from None


def query(
    url: str,
    api_key: str | None = None,
    model_id: str | None = None,
    context_length: int | None = None,
    timeout: float = 5.0,
) -> ServerInfo:
    """Ask ``url``/v1/models for the model id and its context length.

    ``model_id`` picks one of several served models (default: the first); ``context_length``
    overrides the server's number (or stands in for it when the server gives none)."""
    data = _get(url + "/v1/models", api_key, timeout).get("data") or []
    if not data:
        raise AgentsError(f"{url}/v1/models lists no model")
    ids = [m.get("id") for m in data]
    if model_id is not None and model_id not in ids:
        raise AgentsError(
            f"{url} does not serve a model {model_id!r}; it serves {', '.join(map(str, ids))}"
        )
    model = data[ids.index(model_id)] if model_id is not None else data[0]
    reported = next(
        (int(model[k]) for k in _CONTEXT_FIELDS if isinstance(model.get(k), (int, float))), None
    )
    ctx = context_length or reported or FALLBACK_CONTEXT
    return ServerInfo(url, str(model["id"]), ctx, context_reported=bool(context_length or reported))


def estimate_from_checkpoint(model: str, serve_args: list[str]) -> ServerInfo:
    """What ``ft serve --model PATH`` would report, read from the checkpoint's config.json (for --dry-run)."""
    ctx = FALLBACK_CONTEXT
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
        text = cfg.get("text_config") or {}
        ctx = int(cfg.get("max_position_embeddings") or text.get("max_position_embeddings") or ctx)
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    if "--max-model-len" in serve_args[:-1]:
        ctx = min(ctx, int(serve_args[serve_args.index("--max-model-len") + 1]))
    name = (
        serve_args[serve_args.index("--served-model-name") + 1]
        if "--served-model-name" in serve_args[:-1]
        else None
    )
    return ServerInfo(
        "http://127.0.0.1:<port>", name or Path(model).resolve().name, ctx, context_reported=False
    )


def ft_serve_command() -> list[str]:
    """How to run ``ft``: the ft-serve package of this Python, else an ``ft`` on PATH (no import of ft_serve)."""
    if find_spec("ft_serve") is not None:
        return [sys.executable, "-m", "ft_serve.cli"]
    if exe := shutil.which("ft"):
        return [exe]
    raise AgentsError(
        "--model needs `ft serve`, which is not installed here: pip install ft-serve "
        "(or start a server yourself and pass --server URL)"
    )


class ManagedServer:
    """``ft serve --model PATH --port 0`` in its own process group; its log goes to ``log_path``;
    the API key reaches it as ``$FT_API_KEY`` (never on its command line).

    ``start()`` returns the URL from the ready line; ``stop()`` sends SIGTERM (the server drains)
    and kills it if it has not exited after ``grace`` seconds."""

    READY = re.compile(r"ready at (https?://\S+)")

    def __init__(
        self,
        model: str,
        log_path: Path,
        api_key: str | None = None,
        extra_args: list[str] = (),
        timeout: float = 1800.0,
        grace: float = 30.0,
    ):
        self.argv = [
            *ft_serve_command(),
            "serve",
            "--model",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            *extra_args,
        ]
        self.env = {k: v for k, v in os.environ.items() if k != "FT_API_KEY"}
        if api_key:  # through the environment: a key on the command line is visible in `ps`
            self.env["FT_API_KEY"] = api_key
        self.log_path, self.timeout, self.grace = log_path, timeout, grace
        self.proc: subprocess.Popen | None = None

    def display(self) -> str:
        shown = [
            "***" if i and self.argv[i - 1] == "--api-key" else a for i, a in enumerate(self.argv)
        ]
        return shlex.join(["ft", *shown[shown.index("serve") :]])

    def start(self) -> str:
        log = open(self.log_path, "w", buffering=1)
        # in its own session: a Ctrl-C in the harness does not reach it
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        found: list[str] = []

        def pump():  # copy stderr to the log for the server's whole life; note the ready line
            for line in self.proc.stderr:
                log.write(line)
                if not found and (m := self.READY.search(line)):
                    found.append(m.group(1).rstrip("/"))
            log.close()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while not found:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pump write the last lines
                tail = "".join(self.log_path.read_text(errors="replace").splitlines(True)[-15:])
                raise AgentsError(
                    f"`{self.display()}` exited with status {self.proc.returncode} before it was "
                    f"ready; its last lines ({self.log_path}):\n{tail}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise AgentsError(
                    f"`{self.display()}` was not ready after {self.timeout:.0f} s; log: {self.log_path}"
                )
            time.sleep(0.1)
        return normalize_url(found[0])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
