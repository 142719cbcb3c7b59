"""The read-only task page: ``GET /tasks/<id>`` (``RSI_WEB_ENABLED``, off by default).

What a maintainer sees when following a ``rsi/verifier`` check's details link:
the task's status, its candidates, the same chart as the PR report (each
candidate's gain vs the Bk of its own session, kept or rolled back), the
newest verifier report and the ledger. It reads the database only, never
GitHub, so it answers in milliseconds and costs no rate limit.

Access needs a token (``RSI_WEB_TOKEN``, comma-separated to rotate):
``Authorization: Bearer <token>``, or ``?token=<token>`` once, which answers
with a cookie (an HMAC of the token: the token itself is never stored in the
browser) and a redirect to the same page without the token in the URL. Or,
with the App's OAuth client (``RSI_WEB_OAUTH_CLIENT_ID`` / ``_SECRET``), a
GitHub login: ``/auth/login`` -> github.com -> ``/auth/callback`` (state
checked), which lists the repositories the person can read through the App's
installations once, at login, and keeps them in a signed cookie (12 hours); a
page opens for a repository on that list. GitHub is called at login only.
Everything shown that came from outside (hypotheses, reasons, proposal text)
is HTML-escaped; the page has no scripts and a Content-Security-Policy that
allows none.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Sequence
from urllib.parse import urlencode

import httpx
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from bot import render
from bot.store import Candidate, Store, Task
from bot.vocab import TASK_STATE_WORDS, decision_style
from harness.ledger import CandidateStatus

log = logging.getLogger("rsi.bot.web")
COOKIE = "rsi_page"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def cookie_value(token: str) -> str:
    """What the browser keeps: proof of the token, not the token."""
    return hmac.new(token.encode(), b"rsi-bot task page v1", hashlib.sha256).hexdigest()


def authorized(tokens: Sequence[str], *, bearer: str | None, cookie: str | None,
               query: str | None) -> bool:
    """Whether a request carries one of ``tokens`` (constant-time comparisons)."""
    ok = False
    for t in tokens:
        for given in (bearer, query):
            if given is not None:
                ok |= hmac.compare_digest(given.encode(), t.encode())
        if cookie is not None:
            ok |= hmac.compare_digest(cookie.encode(), cookie_value(t).encode())
    return ok


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def mount(app: FastAPI, *, store: Store, tokens: Sequence[str], web_root: str = "",
          secure_cookie: bool = True, oauth: OAuth | None = None) -> None:
    """Add ``GET /tasks/{task_id}`` to ``app`` (and ``/auth/...`` with ``oauth``).
    ``web_root``: GitHub's web address (``https://github.com``) for links."""
    tokens = list(tokens)
    if not tokens and oauth is None:
        raise ValueError("the task pages need a token (RSI_WEB_TOKEN) or the GitHub login")
    if oauth is not None:
        _mount_oauth(app, oauth, secure_cookie)

    @app.get("/tasks/{task_id}")
    async def task_page(task_id: int, request: Request) -> Response:
        query = request.query_params.get("token")
        ok = authorized(tokens, bearer=_bearer(request), cookie=request.cookies.get(COOKIE),
                        query=query)
        if not ok and oauth is not None:
            session = oauth.session(request.cookies.get(SESSION))
            if session is None:
                return RedirectResponse(f"/auth/login?next=/tasks/{task_id}", status_code=303,
                                        headers=HEADERS)
            task = await run_in_threadpool(store.task, task_id)
            if task is None or task.repo not in session["r"]:
                return HTMLResponse(_page("Not yours", "<p>Your GitHub account cannot read "
                                          "this task's repository through the App.</p>"),
                                    status_code=403, headers=HEADERS)
            ok, query = True, None
        if not ok:
            return HTMLResponse(_denied(), status_code=401, headers={
                **HEADERS, "WWW-Authenticate": 'Bearer realm="rsi-bot task pages"'})
        if query is not None:  # trade the token in the URL for a cookie, and drop it
            resp = RedirectResponse(f"/tasks/{task_id}", status_code=303, headers=HEADERS)
            resp.set_cookie(COOKIE, cookie_value(query), httponly=True, samesite="strict",
                            secure=secure_cookie, path="/tasks", max_age=7 * 86400)
            return resp
        page = await run_in_threadpool(render_page, store, task_id, web_root)
        if page is None:
            return HTMLResponse(_page("No such task", "<p>There is no task with this id.</p>"),
                                status_code=404, headers=HEADERS)
        return HTMLResponse(page, headers=HEADERS)


# --------------------------------------------------------------------- GitHub login

SESSION = "rsi_session"
STATE = "rsi_oauth_state"
SESSION_S = 12 * 3600
MAX_REPOS = 200


@dataclass(frozen=True)
class OAuth:
    """The App's OAuth client and where GitHub and this service are."""

    client_id: str
    client_secret: str
    web_root: str  # https://github.com (authorize, access_token)
    api_url: str  # https://api.github.com
    public_url: str  # this service (the callback)

    def _key(self) -> bytes:
        return hashlib.sha256(b"rsi-bot session v1\0" + self.client_secret.encode()).digest()

    def sign(self, data: dict[str, Any]) -> str:
        raw = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()
        return raw + "." + hmac.new(self._key(), raw.encode(), hashlib.sha256).hexdigest()

    def unsign(self, value: str | None) -> dict[str, Any] | None:
        raw, _, mac = (value or "").rpartition(".")
        want = hmac.new(self._key(), raw.encode(), hashlib.sha256).hexdigest()
        if not raw or not hmac.compare_digest(mac.encode(), want.encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(raw.encode()))
        except ValueError:
            return None
        return data if isinstance(data, dict) and data.get("e", 0) > time.time() else None

    def session(self, value: str | None) -> dict[str, Any] | None:
        data = self.unsign(value)
        return data if data and isinstance(data.get("r"), list) else None

    def readable_repos(self, user_token: str) -> tuple[str, list[str]]:
        """(login, repositories the person can read through the App's installations)."""
        h = {"Authorization": f"Bearer {user_token}", "Accept": "application/vnd.github+json"}
        with httpx.Client(base_url=self.api_url, headers=h, timeout=20) as c:
            login = str(_ok(c.get("/user"))["login"])
            repos: list[str] = []
            for inst in _ok(c.get("/user/installations", params={"per_page": 100}))[
                    "installations"]:
                page = _ok(c.get(f"/user/installations/{int(inst['id'])}/repositories",
                                 params={"per_page": 100}))
                repos += [str(r["full_name"]) for r in page.get("repositories", [])]
        return login, sorted(set(repos))[:MAX_REPOS]


def _ok(resp: httpx.Response) -> Any:
    if resp.status_code != 200:
        raise GitHubLoginError(f"GitHub answered {resp.status_code} to {resp.request.url.path}")
    return resp.json()


class GitHubLoginError(Exception):
    pass


def _mount_oauth(app: FastAPI, oauth: OAuth, secure: bool) -> None:
    callback = f"{oauth.public_url.rstrip('/')}/auth/callback"

    @app.get("/auth/login")
    async def login(next: str = "/") -> Response:
        nxt = next if re.fullmatch(r"/tasks/\d{1,12}", next) else "/"
        state = secrets.token_urlsafe(24)
        url = (f"{oauth.web_root.rstrip('/')}/login/oauth/authorize?"
               + urlencode({"client_id": oauth.client_id, "redirect_uri": callback,
                            "state": state}))
        resp = RedirectResponse(url, status_code=303, headers=HEADERS)
        resp.set_cookie(STATE, oauth.sign({"s": state, "n": nxt, "e": time.time() + 600}),
                        httponly=True, samesite="lax", secure=secure, path="/auth",
                        max_age=600)
        return resp

    @app.get("/auth/callback")
    async def callback_(request: Request, code: str = "", state: str = "") -> Response:
        saved = oauth.unsign(request.cookies.get(STATE))
        if not saved or not code or not hmac.compare_digest(state.encode(),
                                                            str(saved.get("s")).encode()):
            return HTMLResponse(_page("Login failed", "<p>The login expired or did not start "
                                      "here. Open the task page again.</p>"),
                                status_code=400, headers=HEADERS)
        try:
            login_, repos = await run_in_threadpool(_exchange, oauth, code, callback)
        except (GitHubLoginError, httpx.HTTPError, KeyError, ValueError) as e:
            log.warning("GitHub login failed: %s", e)
            return HTMLResponse(_page("Login failed", f"<p>GitHub login failed: {_h(e)}</p>"),
                                status_code=502, headers=HEADERS)
        resp = RedirectResponse(str(saved.get("n") or "/"), status_code=303, headers=HEADERS)
        resp.set_cookie(SESSION, oauth.sign({"l": login_, "r": repos,
                                             "e": time.time() + SESSION_S}),
                        httponly=True, samesite="lax", secure=secure, path="/",
                        max_age=SESSION_S)
        resp.delete_cookie(STATE, path="/auth")
        return resp


def _exchange(oauth: OAuth, code: str, callback: str) -> tuple[str, list[str]]:
    r = httpx.post(f"{oauth.web_root.rstrip('/')}/login/oauth/access_token", timeout=20,
                   headers={"Accept": "application/json"},
                   json={"client_id": oauth.client_id, "client_secret": oauth.client_secret,
                         "code": code, "redirect_uri": callback})
    data = _ok(r)
    if "access_token" not in data:
        raise GitHubLoginError(f"GitHub refused the code: {str(data.get('error'))[:100]}")
    return oauth.readable_repos(str(data["access_token"]))


# --------------------------------------------------------------------- rendering


def _h(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5rem auto;max-width:1100px;color:#24292f;padding:0 1rem}
h1{font-size:1.4rem;margin-bottom:.2rem}h2{font-size:1.1rem;margin-top:1.8rem}
.status{display:inline-block;padding:.35rem .8rem;border-radius:2rem;background:#ddf4ff;font-weight:600}
.status.failed,.status.refused,.status.invalid{background:#ffebe9}.status.finished{background:#dafbe1}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .55rem;vertical-align:top}th{background:#f6f8fa;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.headline{font-size:1.05rem;padding:.6rem .9rem;border-left:6px solid var(--c);background:#f6f8fa}
tr.fail td{background:#ffebe9}tr.unclear td{background:#fff8c5}tr.objective td{font-weight:600}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85rem}
pre{background:#f6f8fa;padding:.7rem;white-space:pre-wrap;overflow-wrap:anywhere}.muted{color:#57606a}
"""


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_h(title)}</title><style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


def _denied() -> str:
    return _page("rsi-bot: sign in", "<h1>This page needs a token</h1><p>Open it with "
                 "<code>?token=&lt;RSI_WEB_TOKEN&gt;</code> once (a cookie keeps you in), or send "
                 "<code>Authorization: Bearer &lt;token&gt;</code>. Ask the bot's operator for "
                 "the token.</p>")


def render_page(store: Store, task_id: int, web_root: str = "") -> str | None:
    """The task page's HTML from the store alone (None: no such task)."""
    task = store.task(task_id)
    if task is None:
        return None
    cands = store.candidates(task.id, generation=task.generation)
    repo_url = f"{web_root.rstrip('/')}/{task.repo}" if web_root else ""
    body = [_header(task, repo_url), *_held_edit(task), _candidates_table(cands, repo_url)]
    body += _report(task, cands, repo_url)
    return _page(f"rsi task #{task.issue} — {task.repo}", "\n".join(body))


def _held_edit(t: Task) -> list[str]:
    """An edit held for a writer's approval: its digest and its whole diff (the
    status comment links here when its copy is cut)."""
    if t.edited_proposal is None:
        return []
    diff = "\n".join(render.proposal_diff(t.proposal or "", t.edited_proposal))
    return [f'<h2 id="edit">Held edit <code>{_h(render.proposal_digest(t.edited_proposal))}'
            f"</code></h2><p>Not run. A writer runs exactly this text with <code>/rsi rerun "
            f"{_h(render.proposal_digest(t.edited_proposal))}</code> on the issue.</p>"
            f"<pre>{_h(diff)}</pre>"]


def _header(t: Task, repo_url: str) -> str:
    state = TASK_STATE_WORDS.get(t.state, t.state)
    rounds = f"{t.rounds_done}" + (f" of {t.budget}" if t.budget is not None else "")
    issue = (f'<a href="{_h(repo_url)}/issues/{int(t.issue)}">#{int(t.issue)}</a>' if repo_url
             else f"#{int(t.issue)}")
    updated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t.updated_at))
    return (f"<h1>rsi task {issue} · {_h(t.repo)}</h1>"
            f'<p><span id="status" class="status {_h(t.state)}" data-state="{_h(t.state)}">'
            f"{_h(state)}</span></p>"
            f'<p class="muted">Rounds {_h(rounds)} · generation {int(t.generation)} · B0 '
            f"<code>{_h(render.short_sha(t.b0_sha))}</code> · Bk "
            f"<code>{_h(render.short_sha(t.bk_sha))}</code> · updated {_h(updated)}</p>"
            + (f"<h2>Task</h2>{summary_html(t.summary)}" if t.summary else ""))


_STRONG = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def summary_html(text: str) -> str:
    """The task summary (a short markdown list) as HTML: each line escaped first,
    then only ``**bold**`` and ``code`` spans turned into tags, so nothing the
    summary quotes from an issue can open a tag of its own."""
    items = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        body = _CODE.sub(r"<code>\1</code>", _STRONG.sub(r"<strong>\1</strong>", _h(line.removeprefix("- "))))
        items.append(f"<li>{body}</li>")
    return f'<ul class="summary">{"".join(items)}</ul>'


def _gain(c: Candidate) -> str:
    """The objective's change vs Bk in the words of its report (one estimate everywhere)."""
    from harness.report import objective_change

    try:
        return objective_change(c.verdict_model)
    except ValueError:
        return "—"


def _candidates_table(cands: Sequence[Candidate], repo_url: str) -> str:
    if not cands:
        return '<h2>Candidates</h2><p class="muted">No candidates yet.</p>'
    rows = []
    for c in cands:
        style = decision_style(c.decision)
        pr = "—"
        if c.pr_number:
            pr = (f'<a href="{_h(repo_url)}/pull/{int(c.pr_number)}">#{int(c.pr_number)}</a>'
                  if repo_url else f"#{int(c.pr_number)}")
        rows.append(f'<tr class="candidate" data-n="{int(c.n)}"><td>{int(c.n)}</td>'
                    f"<td>{_h(style.emoji)} {_h(style.words)}</td>"
                    f"<td class=\"num\">{_h(_gain(c))}</td>"
                    f"<td>{_h(c.state)}</td><td>{pr}</td><td>{_h(c.hypothesis or '')}</td>"
                    f"<td><code>{_h(render.short_sha(c.sha))}</code></td></tr>")
    return ("<h2>Candidates</h2><table><thead><tr><th>#</th><th>verdict</th><th>change vs Bk</th>"
            "<th>state</th><th>PR</th><th>hypothesis</th><th>sha</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


@dataclass(frozen=True)
class StoredLedgerRow:
    """One row of the task page's ledger (a ``harness.report.LedgerRow``): a
    candidate as the store holds it. ``round`` is None for candidates stored
    before the store kept it (shown blank, never a wrong value)."""

    candidate: int
    round: int | None
    agent: str
    hypothesis: str
    sha: str
    decision: str
    gain: float | None
    gain_vs_b0: float | None
    status: str
    reason: str
    event: str = "candidate"


def ledger_view(cands: Sequence[Candidate]) -> list[StoredLedgerRow]:
    """The task's ledger as the store holds it: one record per candidate (round
    and agent are blank for candidates stored before the store kept them)."""
    out = []
    for c in cands:
        try:
            v = c.verdict_model
        except ValueError:
            v = None
        o = v.objective if v is not None else None
        out.append(StoredLedgerRow(
            candidate=c.n, round=c.round, agent=c.agent or "", hypothesis=c.hypothesis or "",
            sha=c.sha or "", decision=c.decision, gain=o.gain if o is not None else None,
            gain_vs_b0=o.gain_vs_b0 if o is not None else None,
            status=CandidateStatus(c.state).ledger_word, reason=v.reason if v is not None else ""))
    return out


def _report(task: Task, cands: Sequence[Candidate], repo_url: str) -> list[str]:
    """The newest candidate's verifier report (chart of every candidate, ledger)."""
    from harness.report import ReportLinks, html_report_sections

    judged = [c for c in cands if c.verdict]
    if not judged:
        return ['<h2>Report</h2><p class="muted">No verdict yet.</p>']
    newest = judged[-1]
    try:
        verdict = newest.verdict_model
    except ValueError as e:
        return [f"<h2>Report</h2><p>The newest verdict cannot be read: {_h(e)}</p>"]
    if verdict is None:
        return ['<h2>Report</h2><p class="muted">No verdict yet.</p>']
    links = ReportLinks(repo_url=repo_url, branch=newest.branch or "")
    sections = html_report_sections(verdict, history=render.candidate_history(cands),
                                    ledger=ledger_view(cands), links=links)
    return [f"<h2>Newest report: candidate {int(newest.n)}</h2>", *sections]
