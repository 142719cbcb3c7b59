"""The bot's configuration, read from the environment (``RSI_*``).

Built by :func:`load_settings`, never at import, and failing fast with one
message that lists every problem: there is no default webhook secret, and
GitHub credentials must be complete (an App: id + private key; or a token).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class SettingsError(Exception):
    """The environment does not describe a usable bot; ``str()`` says how to fix it."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__(
            "rsi-bot settings are invalid:\n" + "\n".join(f"  - {e}" for e in errors)
        )


_WEAK = {"", "secret", "changeme", "change-me", "default", "test", "password", "xxx"}


class Settings(BaseSettings):
    """Every field is read from ``RSI_<NAME>`` (e.g. ``RSI_WEBHOOK_SECRET``)."""

    model_config = SettingsConfigDict(env_prefix="RSI_", extra="ignore", frozen=True)

    webhook_secret: Annotated[list[str], NoDecode] = Field(
        ...,
        description="HMAC secrets for X-Hub-Signature-256, comma-separated; "
        "the first signs nothing, all are accepted (rotation).",
    )
    github_api_url: str = Field(
        "https://api.github.com",
        description="REST base URL: GitHub Enterprise (https://HOST/api/v3) or a test fake.",
    )
    github_token: str | None = Field(None, description="A token, for development instead of an App.")
    github_app_id: int | None = Field(None, description="The GitHub App's id.")
    github_private_key: str | None = Field(
        None, description="The App's PEM private key (text, or a path to a .pem file)."
    )
    github_installation_id: int | None = Field(
        None, description="Default installation; events carry their own installation id."
    )
    github_throttle: bool = Field(
        True, description="Pace writes 1 s apart as GitHub asks of integrations (off in tests).")
    bot_login: str | None = Field(
        None, description="Our login (e.g. 'rsi-bot[bot]'); asked from GitHub when unset."
    )
    database_url: str = Field(
        "sqlite:///rsi-bot.db",
        description="SQLAlchemy URL: SQLite by default, postgresql+psycopg://... in production.",
    )
    trigger_label: str = Field("rsi", description="The issue label that starts a task.")
    executor: Literal["local", "actions"] = Field(
        "local", description="Where harness jobs run: this host, or GitHub Actions runners."
    )
    workers: int = Field(2, ge=0, le=64, description="Worker threads in `rsi serve` (0: none).")
    state_dir: Path = Field(
        Path("rsi-state"), description="Clones and harness state for local jobs."
    )
    max_body_bytes: int = Field(
        25 * 1024 * 1024, gt=0, description="Webhook bodies above this are refused (413)."
    )
    lease_s: float = Field(60.0, gt=0, description="A running job's lease; heartbeats renew it.")
    intake_timeout_s: float = Field(
        5.0, gt=0, le=9.0,
        description="How long POST /webhook waits for the store before answering 503 (GitHub "
        "gives up after 10 s; the delivery is then redelivered).")
    redeliver_interval_s: float = Field(
        300.0, ge=0,
        description="How often the App's failed or unstored deliveries are asked for again "
        "(GET /app/hook/deliveries; also once at start); 0: never. Needs a GitHub App.")
    redeliver_lookback_s: float = Field(
        86400.0, gt=0, le=3 * 86400.0,
        description="How far back the redelivery sweep looks (GitHub keeps 3 days).")
    poll_s: float = Field(0.5, gt=0, description="How often idle workers look for jobs.")
    max_attempts: int = Field(8, ge=1, description="Retries (with backoff) before a job fails.")
    backoff_base_s: float = Field(2.0, gt=0, description="First retry delay; doubles each time.")
    backoff_max_s: float = Field(600.0, gt=0, description="Longest retry delay.")
    job_workflow: str = Field(
        "rsi-job.yml", description="The target repo's workflow that calls rsi-job (actions executor)."
    )
    runner_labels: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["self-hosted"],
        description="Runner labels for cpu profiles that declare no runs_on (actions executor), "
        "comma-separated; cuda and npu profiles default to [\"self-hosted\", device].",
    )
    public_url: str | None = Field(None, description="Where this bot is reachable (details links).")
    web_enabled: bool = Field(
        False, description="Serve the read-only task pages at /tasks/<id> (off by default).")
    web_token: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Tokens that open the task pages (comma-separated to rotate; at least 16 "
        "characters): `?token=` once (then a cookie) or `Authorization: Bearer`.")
    metrics_token: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Tokens that open /metrics (`Authorization: Bearer`, comma-separated to "
        "rotate; at least 16 characters). Without one, /metrics answers only requests from this "
        "machine (loopback) that no proxy forwarded.")
    web_oauth_client_id: str | None = Field(
        None, description="The App's OAuth client id: task pages then also open after a GitHub "
        "login, for people who can read the task's repository (through the App).")
    web_oauth_client_secret: str | None = Field(
        None, description="The App's OAuth client secret (with RSI_WEB_OAUTH_CLIENT_ID).")
    log_format: Literal["json", "console"] = Field(
        "json", description="Log lines as JSON (one object per line) or for a terminal.")
    onboarding: bool = Field(
        True, description="Open an onboarding PR (rsi init's files) on repositories the App is "
        "installed on that have no .rsi/config.toml.")
    allowed_repos: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Repositories served, comma-separated: owner/name or owner/* (empty: every "
        "repository the App is installed on). Deliveries for others are acknowledged, not stored.")
    allowed_installations: Annotated[list[int], NoDecode] = Field(
        default_factory=list,
        description="Installation ids served, comma-separated (empty: any).")

    @field_validator("allowed_repos", "allowed_installations", mode="before")
    @classmethod
    def _split_lists(cls, v):
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        return v

    @field_validator("allowed_repos")
    @classmethod
    def _repo_patterns(cls, v: list[str]) -> list[str]:
        import re

        for p in v:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+/(\*|[A-Za-z0-9_.-]+)", p):
                raise ValueError(f"'{p}' is not owner/name or owner/*")
        return v

    @field_validator("webhook_secret", "runner_labels", "web_token", "metrics_token",
                     mode="before")
    @classmethod
    def _split(cls, v):
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        return v

    @field_validator("webhook_secret")
    @classmethod
    def _strong(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("set RSI_WEBHOOK_SECRET to the App's webhook secret (no default)")
        for s in v:
            if s.lower() in _WEAK or len(s) < 8:
                raise ValueError(
                    "RSI_WEBHOOK_SECRET holds a weak or placeholder secret "
                    "(at least 8 characters, not a default word)"
                )
        return v

    @field_validator("github_private_key")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        if v and "BEGIN" not in v:
            p = Path(v).expanduser()
            if not p.is_file():
                raise ValueError(f"RSI_GITHUB_PRIVATE_KEY is neither a PEM key nor a file: {v}")
            v = p.read_text()
        return v.replace("\\n", "\n") if v else v

    @field_validator("web_token", "metrics_token")
    @classmethod
    def _web_tokens(cls, v: list[str], info) -> list[str]:
        for t in v:
            if t.lower() in _WEAK or len(t) < 16:
                raise ValueError(f"RSI_{info.field_name.upper()} holds a weak token (at least 16 "
                                 "characters)")
        return v

    @model_validator(mode="after")
    def _together(self) -> "Settings":
        problems = cross_problems(lambda k: getattr(self, k))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def uses_app(self) -> bool:
        return self.github_app_id is not None


def cross_problems(get: Any) -> list[str]:
    """Problems of settings that go together (``get(name)``: a value or None),
    all of them: checked on the parsed settings and, when fields failed first,
    on the raw environment, so one start lists everything that is missing."""
    out = []
    oauth = (get("web_oauth_client_id"), get("web_oauth_client_secret"))
    if any(oauth) and not all(oauth):
        out.append("the GitHub login needs both RSI_WEB_OAUTH_CLIENT_ID and "
                   "RSI_WEB_OAUTH_CLIENT_SECRET")
    if all(oauth) and not get("public_url"):
        out.append("the GitHub login needs RSI_PUBLIC_URL (its callback address)")
    enabled = get("web_enabled")
    if isinstance(enabled, str):
        enabled = enabled.strip().lower() in ("1", "true", "yes", "on")
    if enabled and not get("web_token") and not all(oauth):
        out.append("RSI_WEB_ENABLED needs RSI_WEB_TOKEN or the App's GitHub login "
                   "(RSI_WEB_OAUTH_CLIENT_ID and _SECRET): the task pages are never "
                   "served to anyone")
    app = get("github_app_id") not in (None, "") or bool(get("github_private_key"))
    if app and (get("github_app_id") in (None, "") or not get("github_private_key")):
        out.append("GitHub App auth needs both RSI_GITHUB_APP_ID and RSI_GITHUB_PRIVATE_KEY")
    if not app and not get("github_token"):
        out.append("no GitHub credentials: set RSI_GITHUB_APP_ID + RSI_GITHUB_PRIVATE_KEY "
                   "(a GitHub App), or RSI_GITHUB_TOKEN (development)")
    return out


class _OnlyGiven(Settings):
    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **_others):
        return (init_settings,)


def load_settings(env: Mapping[str, str] | None = None, **overrides) -> Settings:
    """Build the settings from ``env`` (default: the process environment).

    Raises :class:`SettingsError` listing every problem in words a deployer can act on.
    """
    source = os.environ if env is None else env
    values: dict[str, Any] = {k[len("RSI_"):].lower(): v for k, v in source.items()
                              if k.upper().startswith("RSI_")}
    values.update(overrides)
    try:
        if env is None:
            return Settings(**overrides)
        # An explicit mapping is the only source: os.environ is not read.
        return _OnlyGiven(**values)
    except ValidationError as e:
        errors = []
        together = cross_problems(lambda k: values.get(k))
        for err in e.errors():
            if err["type"] == "value_error" and not err["loc"]:
                continue  # the settings that go together: listed from ``together`` below
            loc = ".".join(str(x) for x in err["loc"])
            name = f"RSI_{loc.upper()}" if loc else "settings"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                msg = "is required (no default)"
                if loc == "webhook_secret":
                    msg = "is required: the App's webhook secret (comma-separated to rotate)"
            errors.append(f"{name}: {msg}" if loc else msg)
        raise SettingsError(errors + together) from None


def settings_table() -> str:
    """``docs/service-settings.md``: every setting, its default and what it does,
    from the model itself (a test keeps the checked-in file current)."""
    from pydantic_core import PydanticUndefined

    lines = [
        "# Service settings",
        "",
        "The service (`rsi serve`) and its workers read these environment variables.",
        "Generated from `bot/settings.py`: `python -m bot.settings > docs/service-settings.md`.",
        "Secrets (`RSI_WEBHOOK_SECRET`, `RSI_GITHUB_TOKEN`, `RSI_GITHUB_PRIVATE_KEY`,",
        "`RSI_WEB_TOKEN`, `RSI_WEB_OAUTH_CLIENT_SECRET`) are never logged or shown.",
        "",
        "| variable | default | what it does |",
        "|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        if field.default is PydanticUndefined and field.default_factory is None:
            default = "required"
        elif field.default_factory is not None:
            default = "empty"
        else:
            default = f"`{field.default}`" if field.default is not None else "unset"
        text = (field.description or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `RSI_{name.upper()}` | {default} | {text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_table(), end="")
