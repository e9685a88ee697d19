"""Configuration: TOML file, env overrides, secrets only from env or a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import ConfigError, load_settings
from tests.conftest import ROOT


def test_shipped_config_loads_and_matches_embedded_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    from bot.config import Settings

    assert load_settings(ROOT / "config" / "digestbot.toml").model_dump() == Settings().model_dump()


def test_env_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[smtp]\nhost = "mail.example.org"\nport = 2525\n[feeds]\nurls = ["https://a.example/rss"]\n')
    monkeypatch.setenv("DIGESTBOT_SMTP__PORT", "587")
    monkeypatch.setenv("DIGESTBOT_DATABASE__URL", "sqlite:////tmp/x.sqlite3")
    settings = load_settings(cfg)
    assert (settings.smtp.host, settings.smtp.port) == ("mail.example.org", 587)
    assert settings.database_url == "sqlite:////tmp/x.sqlite3"
    assert settings.feeds.urls == ["https://a.example/rss"]


def test_default_database_is_sqlite_under_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings().database_url == "sqlite:///var/digestbot.sqlite3"


def test_password_in_file_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[smtp]\npassword = "hunter2"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert "smtp.password is not allowed in the config file" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_password_from_env_or_file_is_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGESTBOT_SMTP__PASSWORD", "s3cret-env")
    settings = load_settings(None)
    assert settings.smtp.resolved_password().get_secret_value() == "s3cret-env"
    assert "s3cret-env" not in repr(settings) and "s3cret-env" not in str(settings.redacted())
    monkeypatch.delenv("DIGESTBOT_SMTP__PASSWORD")
    secret = tmp_path / "pw"
    secret.write_text("s3cret-file\n")
    monkeypatch.setenv("DIGESTBOT_SMTP__PASSWORD_FILE", str(secret))
    settings = load_settings(None)
    assert settings.smtp.resolved_password().get_secret_value() == "s3cret-file"
    assert "s3cret-file" not in str(settings.redacted())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[smtp]\nport = 0\n", "smtp.port"),
        ('[smtp]\ntls = "maybe"\n', "smtp.tls"),
        ("[nonsense]\nx = 1\n", "nonsense"),
        ('[feeds]\nurls = ["file:///etc/passwd"]\n', "not an http(s) URL"),
        ("this is = = not toml", "c.toml"),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, content: str, message: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.toml")
