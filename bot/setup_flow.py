"""``/setup``: create the GitHub App from its manifest (GitHub's manifest flow).

1. ``rsi setup --public-url https://bot.example.com`` serves ``/setup`` and
   prints a one-time link, ``<public url>/setup?token=...``.
2. That page posts ``.github/app-manifest.json`` (its ``{{public_url}}`` and
   ``{{name}}`` placeholders filled in here) to GitHub's "new App" form, with a
   ``state`` that only this server issued.
3. GitHub creates the App and redirects to ``/setup?code=...&state=...``; the
   server converts the code (``POST /app-manifests/{code}/conversions``) and
   stores the App id, its private key and the webhook secret under ``--out``
   (``private-key.pem`` and ``app.env``, both mode 0600, created with
   ``O_EXCL`` in a directory this user owns and no one else may write to: a
   planted file, a symlink or someone else's directory is refused). Nothing
   secret is printed or shown: the page names the files.

The one-time token (console only; it opens the form once) and the single-use state keep anyone else
from driving the flow, e.g. to make the bot store the credentials of an App
they own. A configured service (``rsi serve``) mounts only a status page at
``/setup``: the flow runs before the service has credentials.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import stat
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True)


class SetupError(Exception):
    """The manifest flow cannot go on; the message says why (never a secret)."""


def check_public_url(url: str) -> str:
    u = urlsplit(url.strip())
    local = u.hostname in ("localhost", "127.0.0.1", "::1")
    if u.scheme not in ("https", "http") or not u.hostname or (u.scheme == "http" and not local):
        raise SetupError(f"public URL {url!r}: use https://HOST (http only for localhost)")
    if u.query or u.fragment:
        raise SetupError(f"public URL {url!r}: no query or fragment")
    return url.strip().rstrip("/")


def render_manifest(public_url: str, name: str = "rsi-bot") -> dict[str, Any]:
    """The App manifest with its placeholders filled in."""
    text = resources.files("bot").joinpath("templates", "app-manifest.json").read_text()
    values = {"{{public_url}}": check_public_url(public_url), "{{name}}": name}

    def fill(v: Any) -> Any:
        if isinstance(v, str):
            for k, x in values.items():
                v = v.replace(k, x)
            return v
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fill(x) for x in v]
        return v

    return fill(json.loads(text))


def web_url(api_url: str) -> str:
    """github.com for api.github.com; https://HOST for GHES's https://HOST/api/v3."""
    u = urlsplit(api_url.rstrip("/"))
    if u.hostname == "api.github.com":
        return "https://github.com"
    path = u.path.removesuffix("/api/v3")
    return f"{u.scheme}://{u.netloc}{path}"


@dataclass(frozen=True)
class AppCredentials:
    app_id: int
    slug: str
    html_url: str
    pem: str = field(repr=False)
    webhook_secret: str | None = field(repr=False)


def convert(api_url: str, code: str, *, client: Any = None) -> AppCredentials:
    """Exchange the redirect's code for the App's credentials."""
    import httpx

    if not code.isascii() or not code.replace("-", "").replace("_", "").isalnum():
        raise SetupError("the code GitHub sent back is malformed")
    own = client is None
    client = client or httpx.Client(timeout=30)
    try:
        r = client.post(f"{api_url.rstrip('/')}/app-manifests/{code}/conversions",
                        headers={"Accept": "application/vnd.github+json"})
    except httpx.HTTPError as exc:
        raise SetupError(f"GitHub did not answer the conversion: {type(exc).__name__}") from None
    finally:
        if own:
            client.close()
    if r.status_code != 201:
        raise SetupError(f"GitHub refused the conversion ({r.status_code}); the code is "
                         "valid for one hour and one use: start again from /setup")
    d = r.json()
    if not isinstance(d.get("id"), int) or "BEGIN" not in str(d.get("pem", "")):
        raise SetupError("GitHub's conversion answer has no App id or private key")
    return AppCredentials(d["id"], str(d.get("slug", "")), str(d.get("html_url", "")),
                          d["pem"], d.get("webhook_secret"))


def _check_owned(out: Path, st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise SetupError(f"{out} is not a plain directory (a symlink or a file): give --out a "
                         "new directory")
    if st.st_uid != os.geteuid():
        raise SetupError(f"{out} is owned by user {st.st_uid}, not by you ({os.geteuid()}): "
                         "give --out a directory of your own (a new one is created 0700)")
    if st.st_mode & 0o022:
        raise SetupError(f"{out} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
                         f"chmod 700 {out}, or give --out a new directory")


def own_directory(out: Path, *, create: bool = True) -> Path:
    """``out`` as a directory this user owns, no one else may write to, and that
    is not a symlink (created 0700 when missing); else :class:`SetupError`. The
    App's key goes there: a directory someone else controls could hand them it."""
    out = Path(out)
    if create:
        try:
            out.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return out  # created by store() later
    _check_owned(out, st)
    return out


def _open_own_directory(out: Path) -> int:
    """A file descriptor of ``out`` (never through a symlink), checked on the
    descriptor itself: what is written under it goes where was checked, even if
    the path is swapped afterwards."""
    own_directory(out)
    try:
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise SetupError(f"{out} is not a plain directory (a symlink or a file): give --out a "
                         "new directory") from None
    try:
        _check_owned(out, os.fstat(fd))
    except SetupError:
        os.close(fd)
        raise
    return fd


def _write_private(where: int, name: str, text: str, shown: Path) -> None:
    """Create ``name`` 0600 in the directory ``where`` (a descriptor) with
    ``text``: never an existing file, never through a symlink (``O_EXCL``): a
    file planted there first is refused, not written."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=where)
    except FileExistsError:
        raise SetupError(f"{shown} exists already (not created by this setup): remove it, or "
                         "give --out a new directory") from None
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def store(creds: AppCredentials, out: Path, *, public_url: str,
          key_path: str | None = None) -> Path:
    """Write ``private-key.pem`` and ``app.env`` (0600, ``O_EXCL``) under ``out``, a
    directory this user owns (:func:`own_directory`, checked on its descriptor);
    refuse to replace either file. Returns the path of ``app.env``."""
    out = Path(out)
    env_path, pem = out / "app.env", out / "private-key.pem"
    dfd = _open_own_directory(out)
    try:
        try:
            os.stat("app.env", dir_fd=dfd, follow_symlinks=False)
            raise SetupError(f"{env_path} exists: an App is already set up there; move it "
                             "away to set up another")
        except FileNotFoundError:
            pass
        _write_private(dfd, "private-key.pem", creds.pem, pem)
        lines = [f"RSI_GITHUB_APP_ID={creds.app_id}",
                 f"RSI_GITHUB_PRIVATE_KEY={key_path or pem.resolve()}",
                 f"RSI_BOT_LOGIN={creds.slug}[bot]", f"RSI_PUBLIC_URL={public_url}"]
        if creds.webhook_secret:
            lines.append(f"RSI_WEBHOOK_SECRET={creds.webhook_secret}")
        _write_private(dfd, "app.env", "\n".join(lines) + "\n", env_path)
    finally:
        os.close(dfd)
    return env_path


class SetupFlow:
    """The state of one manifest flow: the console token, the states issued."""

    def __init__(self, *, api_url: str, public_url: str, out: Path, name: str = "rsi-bot",
                 org: str | None = None, key_path: str | None = None, client: Any = None,
                 on_done: Callable[[str], None] | None = None):
        self.api_url, self.public_url = api_url, check_public_url(public_url)
        self.out, self.name, self.org, self.key_path = Path(out), name, org, key_path
        self.client, self.on_done = client, on_done
        self.token = secrets.token_urlsafe(24)
        self.token_used = False
        self.states: set[str] = set()
        self.done: AppCredentials | None = None
        self.lock = threading.Lock()

    @property
    def start_url(self) -> str:
        return f"{self.public_url}/setup?token={self.token}"

    def form(self, token: str) -> tuple[int, str]:
        if self.done is not None:
            return 410, _page("Already set up", f"App {self.done.slug} was created.")
        if not secrets.compare_digest(token, self.token):
            return 403, _page("Not allowed", "Open the link `rsi setup` printed on its console.")
        state = secrets.token_urlsafe(24)
        with self.lock:  # the console's link opens the form once
            if self.token_used:
                return 403, _page("Link used", "This one-time link was opened already. Stop "
                                  "`rsi setup` and start it again for a new link.")
            self.token_used = True
            self.states.add(state)
        web = web_url(self.api_url)
        target = (f"{web}/organizations/{self.org}/settings/apps/new" if self.org
                  else f"{web}/settings/apps/new")
        manifest = json.dumps(render_manifest(self.public_url, self.name))
        body = (f'<form method="post" action="{html.escape(target)}?state={html.escape(state)}">'
                f'<input type="hidden" name="manifest" value="{html.escape(manifest)}">'
                f'<p>Create the GitHub App <b>{html.escape(self.name)}</b> for '
                f'{html.escape(self.public_url)}{" in " + html.escape(self.org) if self.org else ""}.</p>'
                '<button type="submit">Create the App on GitHub</button></form>')
        return 200, _page("Set up rsi-bot", body)

    def callback(self, code: str, state: str) -> tuple[int, str]:
        with self.lock:
            known = state in self.states
            self.states.discard(state)
            if self.done is not None:
                return 410, _page("Already set up", f"App {self.done.slug} was created.")
        if not known:
            return 403, _page("Not allowed", "This setup link was not issued by this server, "
                              "or was used already. Start again from the link on the console.")
        try:
            creds = convert(self.api_url, code, client=self.client)
            env = store(creds, self.out, public_url=self.public_url, key_path=self.key_path)
        except SetupError as exc:
            return 502, _page("Setup failed", html.escape(str(exc)))
        self.done = creds
        if self.on_done is not None:  # the console: where, never what
            self.on_done(f"App {creds.slug} (id {creds.app_id}) created; credentials in {env} "
                         f"(0600). Stop this server, then install the App: "
                         f"{creds.html_url}/installations/new")
        missing = "" if creds.webhook_secret else (
            "<p>GitHub returned no webhook secret: set one in the App's settings and add "
            "<code>RSI_WEBHOOK_SECRET</code> to app.env.</p>")
        return 200, _page("rsi-bot App created", (
            f"<p>App <b>{html.escape(creds.slug)}</b> (id {creds.app_id}) was created. Its "
            f"id, private key and webhook secret are stored in <code>{html.escape(str(env))}"
            "</code> (mode 0600).</p>" + missing +
            f'<p>Next: <a href="{html.escape(creds.html_url)}/installations/new">install it</a> '
            "on your repositories, then start the service with that environment "
            "(<code>docker compose up -d</code> or <code>rsi serve</code>).</p>"))


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def router(flow: SetupFlow | None, *, app_id: int | None = None) -> Any:
    """``GET /setup``: the flow, or (``flow`` None: a configured service) a status page."""
    from fastapi import APIRouter
    from fastapi.responses import HTMLResponse

    r = APIRouter()

    @r.get("/setup", response_class=HTMLResponse)
    def setup(token: str = "", code: str = "", state: str = "") -> HTMLResponse:
        if flow is None:
            what = f"App id {app_id}" if app_id else "a token"
            return HTMLResponse(_page("rsi-bot is set up", f"This service runs with {what}. "
                                      "To create another App, run `rsi setup`."))
        status, page = flow.callback(code, state) if code else flow.form(token)
        return HTMLResponse(page, status_code=status)

    return r


def mount(fastapi_app: Any, settings: Any) -> None:
    """What ``bot.app.create_app`` mounts: the status page of a configured service."""
    fastapi_app.include_router(router(None, app_id=getattr(settings, "github_app_id", None)))


def setup_app(flow: SetupFlow) -> Any:
    from fastapi import FastAPI

    web = FastAPI(title="rsi-bot setup", docs_url=None, redoc_url=None, openapi_url=None)
    web.include_router(router(flow))

    @web.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    return web


@app.command("setup")
def setup_cmd(
    public_url: str = typer.Option(..., "--public-url", help="Where GitHub reaches this service (https://HOST)."),
    out: Path = typer.Option(Path("rsi-app"), "--out", help="Where app.env and private-key.pem go."),
    name: str = typer.Option("rsi-bot", "--name", help="The App's name on GitHub (unique there)."),
    org: str | None = typer.Option(None, "--org", help="Create the App in this organization."),
    key_path: str | None = typer.Option(None, "--key-path", help="The key's path as the service sees it "
                                        "(e.g. /run/rsi-app/private-key.pem in docker compose)."),
    github_api_url: str = typer.Option("https://api.github.com", envvar="RSI_GITHUB_API_URL"),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on."),
    port: int = typer.Option(8080, help="Port to listen on."),
) -> None:
    """Create the GitHub App from its manifest and store its credentials (serves /setup)."""
    import uvicorn

    try:
        flow = SetupFlow(api_url=github_api_url, public_url=public_url, out=out, name=name,
                         org=org, key_path=key_path, on_done=typer.echo)
    except SetupError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if os.path.lexists(out / "app.env") or os.path.lexists(out / "private-key.pem"):
        typer.echo(f"{out} holds app.env or private-key.pem already: an App is set up there, "
                   "or someone planted a file; give --out a new directory", err=True)
        raise typer.Exit(1)
    try:
        own_directory(out, create=False)
    except SetupError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    typer.echo(f"Open this link in a browser logged in to GitHub (one-time):\n  {flow.start_url}")
    uvicorn.run(setup_app(flow), host=host, port=port, log_level="warning", access_log=False)
