"""``ft ctl``: talk to a running server's admin endpoints (stdlib HTTP only).

ft ctl memory                       # the current split and the resize history
ft ctl memory --kv 2GiB --experts 6GiB
ft ctl memory --total 8GiB          # the expert cache absorbs the change first
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

from ft_core import env as ft_env


def add_parser(sub) -> None:
    c = sub.add_parser(
        "ctl",
        help="control a running server (memory split)",
        description="Control a running ft server through its admin endpoints.",
    )
    csub = c.add_subparsers(dest="ctl_command", required=True)
    m = csub.add_parser(
        "memory",
        help="show or change the memory split (KV pages, expert slots, state slots)",
        description="Without sizes: print the split and the resize history. With sizes (bytes or "
        "e.g. 512MiB, 2GB): resize at the next safe point; running requests go on.",
    )
    m.add_argument(
        "--server",
        default=ft_env.text("FT_SERVER_URL"),
        help="server URL (default: $FT_SERVER_URL or http://127.0.0.1:8000)",
    )
    m.add_argument(
        "--key",
        default=ft_env.text("FT_ADMIN_KEY") or ft_env.text("FT_API_KEY"),
        help="admin or API key (default: --key-file, then $FT_ADMIN_KEY, then $FT_API_KEY)",
    )
    m.add_argument("--key-file", default=None, metavar="PATH", help="read the key from PATH")
    for part in ("total", "kv", "experts", "states"):
        m.add_argument(
            f"--{part}", default=None, metavar="BYTES", help=f"new size of the {part} budget"
        )
    m.add_argument("--json", action="store_true", help="print the server's JSON answer")
    m.set_defaults(func=memory)


def _request(url: str, key: str | None, body: dict | None) -> tuple[int, dict]:
    """One call: a JSON body with ``Content-Type: application/json`` (the server refuses other
    bodies), sent to the URL's own host name (the Host header urllib derives from it)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method="POST" if body is not None else "GET",
        headers={
            "content-type": "application/json",
            **({"authorization": f"Bearer {key}"} if key else {}),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, {"error": {"message": e.reason}}


def memory(args) -> int:
    from ft_core.errors import FTError

    body = {
        k: getattr(args, k)
        for k in ("total", "kv", "experts", "states")
        if getattr(args, k) is not None
    }
    url = args.server.rstrip("/") + "/v1/admin/memory"
    key = args.key
    if args.key_file:
        from ft_serve.server.auth import load_key

        key = load_key(None, args.key_file, "FT_ADMIN_KEY", "--key")
    try:
        status, out = _request(url, key, body or None)
    except (urllib.error.URLError, OSError) as e:
        raise FTError(
            f"cannot reach {url}: {getattr(e, 'reason', e)} (is `ft serve` running? --server?)"
        ) from None
    if status != 200:
        print(
            f"ft ctl memory: error {status}: {out.get('error', {}).get('message', out)}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    s = out["split"]
    gib = lambda n: f"{n / (1 << 30):.3f} GiB"  # noqa: E731
    print(
        f"total {gib(s['total'])}: kv {gib(s['kv'])} ({s['kv_pages']} pages, {s['kv_pages_in_use']} in use), "
        f"experts {gib(s['experts'])} ({s['expert_slots']} slots), states {gib(s['states'])} ({s['state_slots']} slots)"
    )
    if "minimum" in out:
        m = out["minimum"]
        print(
            f"minimum: kv {gib(m['kv'])} (one request of the context limit), "
            f"experts {gib(m['experts'])}"
        )
    print(f"elastic: {out['elastic'].get('mode')}; resizes so far: {out['resizes']}")
    for h in out["history"][-5:]:
        print(
            f"  {h['reason']}: total {gib(h['before']['total'])} -> {gib(h['after']['total'])} in {h['seconds'] * 1e3:.1f} ms"
        )
    return 0
