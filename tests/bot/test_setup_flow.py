"""`/setup`: GitHub's App manifest flow against the fake GitHub, end to end:
the form, the conversion, the stored credentials (0600, never shown), and a
bot that authenticates with them. Also docker-compose.yml's shape."""

from __future__ import annotations

import html
import json
import os
import re
import stat
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from bot.app import create_app
from bot.service import build_port
from bot.settings import load_settings
from bot.setup_flow import (
    SetupError,
    SetupFlow,
    check_public_url,
    render_manifest,
    setup_app,
    web_url,
)

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = "https://bot.example.com"


def test_manifest_placeholders_are_filled_and_match_the_checked_in_file():
    shipped = json.loads((ROOT / ".github/app-manifest.json").read_text())
    packaged = json.loads((ROOT / "bot/templates/app-manifest.json").read_text())
    assert shipped == packaged
    m = render_manifest(PUBLIC, "acme-rsi")
    assert m["hook_attributes"]["url"] == f"{PUBLIC}/webhook"
    assert m["redirect_url"] == f"{PUBLIC}/setup" and m["name"] == "acme-rsi"
    assert "{{" not in json.dumps(m)


@pytest.mark.parametrize("url", ["http://bot.example.com", "ftp://x", "https://x/?a=1", "bot"])
def test_public_url_must_be_https(url):
    with pytest.raises(SetupError):
        check_public_url(url)
    assert check_public_url("http://localhost:8080/") == "http://localhost:8080"


def test_web_url():
    assert web_url("https://api.github.com") == "https://github.com"
    assert web_url("https://ghe.corp/api/v3") == "https://ghe.corp"


def _form(client: TestClient, flow: SetupFlow) -> tuple[str, dict]:
    r = client.get("/setup", params={"token": flow.token})
    assert r.status_code == 200
    action = re.search(r'action="([^"]+)"', r.text).group(1)
    state = html.unescape(action).split("state=", 1)[1]
    manifest = json.loads(html.unescape(re.search(r'name="manifest" value="([^"]+)"', r.text).group(1)))
    return state, manifest


def test_manifest_flow_stores_credentials_the_bot_can_use(fake_github, tmp_path):
    out = tmp_path / "rsi-app"
    said: list[str] = []
    flow = SetupFlow(api_url=fake_github.url, public_url=PUBLIC, out=out, org="acme",
                     on_done=said.append)
    client = TestClient(setup_app(flow))
    assert client.get("/setup").status_code == 403
    assert client.get("/setup", params={"token": "guess"}).status_code == 403
    state, manifest = _form(client, flow)
    assert manifest["redirect_url"] == f"{PUBLIC}/setup"

    code = fake_github.manifest_code(manifest, owner="acme")  # the user clicks "Create"
    assert client.get("/setup", params={"code": code, "state": "forged"}).status_code == 403
    r = client.get("/setup", params={"code": code, "state": state})
    assert r.status_code == 200, r.text
    [app_id] = fake_github.manifest_apps
    a = fake_github.apps[app_id]
    secret = f"whsec-{app_id}-" + "x" * 24
    assert secret not in r.text and "BEGIN" not in r.text and str(app_id) in r.text
    [line] = said
    assert f"id {app_id}" in line and str(out / "app.env") in line and secret not in line
    assert fake_github.requests_to("POST", f"/app-manifests/{code}/conversions")[0].auth == ""

    env_file, pem = out / "app.env", out / "private-key.pem"
    for f in (env_file, pem):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert pem.read_text() == a.private_key_pem
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert env["RSI_GITHUB_APP_ID"] == str(app_id) and env["RSI_WEBHOOK_SECRET"] == secret
    assert env["RSI_BOT_LOGIN"] == "rsi-bot[bot]" and env["RSI_PUBLIC_URL"] == PUBLIC

    settings = load_settings({**env, "RSI_GITHUB_API_URL": fake_github.url})
    port = build_port(settings)  # as the service builds it
    try:
        assert port.bot_login() == "rsi-bot[bot]"
    finally:
        port.close()

    # the code and the state are single-use; the flow is over
    assert client.get("/setup", params={"code": code, "state": state}).status_code == 410
    assert client.get("/setup", params={"token": flow.token}).status_code == 410


def test_a_failed_conversion_stores_nothing(fake_github, tmp_path):
    flow = SetupFlow(api_url=fake_github.url, public_url=PUBLIC, out=tmp_path / "o")
    client = TestClient(setup_app(flow))
    state, _ = _form(client, flow)
    r = client.get("/setup", params={"code": "mfc-unknown", "state": state})
    assert r.status_code == 502 and "404" in r.text
    assert not (tmp_path / "o" / "app.env").exists()


def test_existing_credentials_are_never_replaced(fake_github, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "app.env").write_text("RSI_GITHUB_APP_ID=1\n")
    flow = SetupFlow(api_url=fake_github.url, public_url=PUBLIC, out=out)
    client = TestClient(setup_app(flow))
    state, manifest = _form(client, flow)
    r = client.get("/setup", params={"code": fake_github.manifest_code(manifest), "state": state})
    assert r.status_code == 502 and "already set up" in r.text
    assert (out / "app.env").read_text() == "RSI_GITHUB_APP_ID=1\n"


NOBODY = 65534


def _created(fake_github, flow: SetupFlow) -> tuple[TestClient, int, str]:
    """The flow up to GitHub's redirect: (client, its status, its page)."""
    client = TestClient(setup_app(flow))
    state, manifest = _form(client, flow)
    r = client.get("/setup", params={"code": fake_github.manifest_code(manifest), "state": state})
    return client, r.status_code, r.text


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="planting a file owned by another user needs root (chown)")
def test_a_planted_key_file_or_someone_elses_directory_is_refused(fake_github, tmp_path):
    """Issue 18: the App's key is never written into a file or a directory another
    user prepared (they could read it there)."""
    out = tmp_path / "planted"
    out.mkdir(mode=0o700)
    pem = out / "private-key.pem"
    pem.write_text("mine\n")
    os.chmod(pem, 0o666)
    os.chown(pem, NOBODY, NOBODY)
    _, status, text = _created(fake_github, SetupFlow(api_url=fake_github.url,
                                                      public_url=PUBLIC, out=out))
    assert status == 502 and "private-key.pem exists already" in text
    assert pem.read_text() == "mine\n" and not (out / "app.env").exists()

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    _, status, text = _created(fake_github, SetupFlow(api_url=fake_github.url,
                                                      public_url=PUBLIC, out=theirs))
    assert status == 502 and f"owned by user {NOBODY}" in text
    assert list(theirs.iterdir()) == []


def test_a_symlinked_or_shared_directory_is_refused(fake_github, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    _, status, text = _created(fake_github, SetupFlow(api_url=fake_github.url,
                                                      public_url=PUBLIC, out=link))
    assert status == 502 and "not a plain directory" in text and list(target.iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    _, status, text = _created(fake_github, SetupFlow(api_url=fake_github.url,
                                                      public_url=PUBLIC, out=shared))
    assert status == 502 and "writable by others" in text and list(shared.iterdir()) == []


def test_the_console_token_opens_the_form_once(fake_github, tmp_path):
    flow = SetupFlow(api_url=fake_github.url, public_url=PUBLIC, out=tmp_path / "o")
    client = TestClient(setup_app(flow))
    state, manifest = _form(client, flow)
    again = client.get("/setup", params={"token": flow.token})  # e.g. a leaked link
    assert again.status_code == 403 and "action=" not in again.text
    r = client.get("/setup", params={"code": fake_github.manifest_code(manifest), "state": state})
    assert r.status_code == 200  # the first form still completes
    assert stat.S_IMODE((tmp_path / "o").stat().st_mode) == 0o700


def test_a_configured_service_shows_only_a_status_page(bot_settings, tmp_path):
    app = create_app(bot_settings(), start_workers=None)
    with TestClient(app) as client:
        r = client.get("/setup", params={"code": "x", "state": "y"})
        assert r.status_code == 200 and "is set up" in r.text and "<form" not in r.text


def test_docker_compose_runs_service_worker_and_postgres():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svc = doc["services"]
    assert {"postgres", "service", "worker", "setup"} <= set(svc)
    for name in ("postgres", "service", "worker"):
        assert svc[name]["healthcheck"]["test"], name
        assert svc[name]["restart"] == "unless-stopped"
    assert svc["service"]["command"][:2] == ["rsi", "serve"]
    assert svc["worker"]["command"][:3] == ["rsi", "worker", "--local"]
    assert svc["worker"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("service", "worker"):
        env = svc[name]["environment"]
        assert env["RSI_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert svc[name]["env_file"][0]["path"] == "rsi-app/app.env"
    assert set(doc["volumes"]) == {"pgdata", "rsi-state"}
    assert "pgdata:/var/lib/postgresql/data" in svc["postgres"]["volumes"]
    assert svc["setup"]["profiles"] == ["setup"] and "--key-path" in svc["setup"]["command"]
