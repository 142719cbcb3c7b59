"""Settings fail fast, with every problem named."""

import pytest

from bot.settings import SettingsError, load_settings

GOOD = {"RSI_WEBHOOK_SECRET": "s3cret-one,s3cret-two", "RSI_GITHUB_TOKEN": "ghp_x"}


def test_defaults_and_rotation():
    s = load_settings(GOOD)
    assert s.webhook_secret == ["s3cret-one", "s3cret-two"]
    assert s.trigger_label == "rsi" and s.executor == "local"
    assert s.database_url.startswith("sqlite")
    assert s.github_api_url == "https://api.github.com"


def test_no_default_secret():
    with pytest.raises(SettingsError) as e:
        load_settings({"RSI_GITHUB_TOKEN": "x"})
    assert "RSI_WEBHOOK_SECRET" in str(e.value)


@pytest.mark.parametrize("weak", ["secret", "changeme", "short", ","])
def test_weak_secret_refused(weak):
    with pytest.raises(SettingsError) as e:
        load_settings({**GOOD, "RSI_WEBHOOK_SECRET": weak})
    assert "RSI_WEBHOOK_SECRET" in str(e.value)


def test_credentials_required():
    with pytest.raises(SettingsError) as e:
        load_settings({"RSI_WEBHOOK_SECRET": "s3cret-one"})
    assert "RSI_GITHUB_TOKEN" in str(e.value)


def test_app_needs_key():
    with pytest.raises(SettingsError) as e:
        load_settings({"RSI_WEBHOOK_SECRET": "s3cret-one", "RSI_GITHUB_APP_ID": "12"})
    assert "RSI_GITHUB_PRIVATE_KEY" in str(e.value)


def test_app_with_key_file(tmp_path):
    key = tmp_path / "k.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n")
    s = load_settings({"RSI_WEBHOOK_SECRET": "s3cret-one", "RSI_GITHUB_APP_ID": "12",
                       "RSI_GITHUB_PRIVATE_KEY": str(key)})
    assert s.uses_app and "BEGIN" in s.github_private_key


def test_executor_is_checked():
    with pytest.raises(SettingsError) as e:
        load_settings({**GOOD, "RSI_EXECUTOR": "k8s"})
    assert "RSI_EXECUTOR" in str(e.value)


def test_reads_process_environment(monkeypatch):
    monkeypatch.setenv("RSI_WEBHOOK_SECRET", "from-env-secret")
    monkeypatch.setenv("RSI_GITHUB_TOKEN", "tok")
    monkeypatch.setenv("RSI_RUNNER_LABELS", "self-hosted,gpu")
    s = load_settings()
    assert s.webhook_secret == ["from-env-secret"] and s.runner_labels == ["self-hosted", "gpu"]


def test_explicit_env_ignores_process_env(monkeypatch):
    monkeypatch.setenv("RSI_TRIGGER_LABEL", "other")
    assert load_settings(GOOD).trigger_label == "rsi"



def test_allow_lists_are_parsed_and_checked(bot_settings):
    s = bot_settings(allowed_repos="acme/*, acme/target", allowed_installations="1,2")
    assert s.allowed_repos == ["acme/*", "acme/target"] and s.allowed_installations == [1, 2]
    with pytest.raises(SettingsError) as e:
        bot_settings(allowed_repos="acme")
    assert "RSI_ALLOWED_REPOS: 'acme' is not owner/name or owner/*" in str(e.value)


@pytest.mark.parametrize("extra, problem", [
    ({"RSI_WEB_ENABLED": "1"}, "RSI_WEB_ENABLED needs RSI_WEB_TOKEN"),
    ({"RSI_WEB_ENABLED": "1", "RSI_WEB_TOKEN": "short"}, "weak token"),
    ({"RSI_WEB_OAUTH_CLIENT_ID": "Iv1.x"}, "needs both RSI_WEB_OAUTH_CLIENT_ID"),
    ({"RSI_WEB_OAUTH_CLIENT_ID": "Iv1.x", "RSI_WEB_OAUTH_CLIENT_SECRET": "y"}, "RSI_PUBLIC_URL"),
])
def test_task_pages_are_never_open_to_anyone(extra, problem):
    with pytest.raises(SettingsError) as e:
        load_settings({**GOOD, **extra})
    assert problem in str(e.value)


def test_task_pages_with_a_token_or_the_github_login():
    s = load_settings({**GOOD, "RSI_WEB_ENABLED": "1", "RSI_WEB_TOKEN": "a" * 16 + ",b" * 1 + "b" * 16})
    assert s.web_enabled and len(s.web_token) == 2 and s.log_format == "json"
    s = load_settings({**GOOD, "RSI_WEB_ENABLED": "true", "RSI_PUBLIC_URL": "https://bot.example",
                       "RSI_WEB_OAUTH_CLIENT_ID": "Iv1.x", "RSI_WEB_OAUTH_CLIENT_SECRET": "y"})
    assert s.web_token == [] and s.web_oauth_client_id == "Iv1.x"


def test_service_settings_doc_is_current():
    """docs/service-settings.md lists every setting with its default (regenerate:
    python -m bot.settings > docs/service-settings.md)."""
    from pathlib import Path

    from bot.settings import Settings, settings_table

    doc = Path(__file__).resolve().parents[2] / "docs" / "service-settings.md"
    assert doc.read_text() == settings_table(), "stale: python -m bot.settings > docs/service-settings.md"
    for name in Settings.model_fields:
        assert f"`RSI_{name.upper()}`" in doc.read_text()


def test_every_missing_setting_is_listed_at_once():
    """An empty environment names the webhook secret AND the credentials in one
    start (the credentials check used to wait until the secret was set)."""
    with pytest.raises(SettingsError) as exc:
        load_settings({"RSI_WEB_ENABLED": "true", "RSI_WEB_OAUTH_CLIENT_ID": "x"})
    text = "\n".join(exc.value.errors)
    assert "RSI_WEBHOOK_SECRET" in text
    assert "no GitHub credentials" in text
    assert "RSI_WEB_OAUTH_CLIENT_SECRET" in text
    assert len(exc.value.errors) == len(set(exc.value.errors))
