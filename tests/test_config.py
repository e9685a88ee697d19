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
    monkeypatch.setenv("DIGESTBOT_INBOX__PASSWORD", "s3cret-imap")
    settings = load_settings(None)
    assert settings.inbox.resolved_password().get_secret_value() == "s3cret-imap"
    assert "s3cret-imap" not in repr(settings) and "s3cret-imap" not in str(settings.redacted())
    assert settings.redacted()["inbox"]["password"] == "**********"


def test_the_imap_password_is_refused_in_the_file_and_in_the_url(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[inbox]\npassword = "hunter2"\n')
    with pytest.raises(ConfigError, match="inbox.password is not allowed in the config file") as info:
        load_settings(cfg)
    assert "hunter2" not in str(info.value)
    cfg.write_text('[inbox]\nurl = "imaps://bot:hunter2@imap.example.org/INBOX"\n')
    with pytest.raises(ConfigError, match="holds a password; set DIGESTBOT_INBOX__PASSWORD") as info:
        load_settings(cfg)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[inbox]\nurl = "imap://bot@imap.example.org/INBOX"\n', "must be imaps://user@host/FOLDER or maildir://"),
        ('[inbox]\nurl = "imaps://imap.example.org/INBOX"\n', "must be imaps://user@host/FOLDER"),
        ('[inbox]\nurl = "maildir://host/path"\n', "maildir:///path/to/Maildir"),
        ('[inbox]\nurl = "imaps://bot@imap.example.org:99999/INBOX"\n', "inbox.url: the port must be a number"),
        ('[inbox]\nurl = "imaps://bot@[::1/INBOX"\n', "inbox.url: Invalid IPv6 URL"),
        ('[inbox]\nother_folder = "a\\"b"\n', "inbox.other_folder: must be a folder name"),
        ("[inbox]\nsoft_bounce_limit = 0\n", "inbox.soft_bounce_limit: must be at least 1"),
        ("[smtp]\nport = 0\n", "smtp.port"),
        ('[smtp]\ntls = "maybe"\n', "smtp.tls"),
        ("[nonsense]\nx = 1\n", "nonsense"),
        ('[feeds]\nurls = ["file:///etc/passwd"]\n', "neither an http(s) URL nor an arXiv source"),
        ('[feeds]\narxiv_base_url = "rss.arxiv.org"\n', "feeds.arxiv_base_url: must be an http(s) URL"),
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


def _leaf_fields() -> list[tuple[str, str, type]]:
    """(section, key, annotation) of every setting but the secrets, which the file
    refuses whatever their value (test_password_in_file_is_refused)."""
    from bot.config import Settings

    found = []
    for section, field in Settings.model_fields.items():
        model = field.annotation
        assert isinstance(model, type)
        for key, leaf in model.model_fields.items():  # type: ignore[attr-defined]
            if key not in ("password", "signing_key", "api_key"):
                found.append((section, key, leaf.annotation))
    return found


PYDANTIC_WORDING = ("Value error", "unable to parse", "Input should", "validation error", "pydantic")


def test_a_misspelled_key_or_section_is_an_error_naming_the_closest(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    for content, expected in (
        ("[smtp]\nprot = 25\n", "smtp.prot: unknown key; did you mean 'port'?"),
        ("[paths]\ndumps_dir = 'x'\n", "paths.dumps_dir: unknown key; did you mean 'dump_dir'?"),
        ("[smpt]\nport = 25\n", "smpt: unknown section; did you mean 'smtp'?"),
        ("[smtp]\nzzzz = 1\n", "smtp.zzzz: unknown key"),
    ):
        cfg.write_text(content)
        with pytest.raises(ConfigError) as info:
            load_settings(cfg)
        assert str(info.value) == f"{cfg}: {expected}"


@pytest.mark.parametrize(("section", "key", "annotation"), _leaf_fields())
def test_every_bad_value_is_one_line_in_our_words_naming_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, key: str, annotation: type
) -> None:
    """Each setting given a value of the wrong kind, from the file and then from the
    environment: the message names that source and the key, and no pydantic wording."""
    if annotation is str:
        bad_toml, bad_env = "[1, 2]", None  # any text is a string; a list is not
    else:
        bad_toml, bad_env = '"not-a-valid-value"', "not-a-valid-value"
    if annotation == list[str]:
        bad_toml = "3"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[{section}]\n{key} = {bad_toml}\n")
    try:
        load_settings(cfg)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{cfg}: {section}.{key}: ") and "\n" not in message
        assert not any(words in message for words in PYDANTIC_WORDING), message
    else:
        assert annotation in (Path, Path | None), f"{section}.{key} took {bad_toml}"
    if bad_env is None or annotation in (Path, Path | None):
        return
    cfg.write_text("")
    monkeypatch.setenv(f"DIGESTBOT_{section.upper()}__{key.upper()}", bad_env)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    message = str(info.value)
    expected = f"environment variable DIGESTBOT_{section.upper()}__{key.upper()} ({section}.{key}): "
    assert message.startswith(expected) and "\n" not in message
    assert not any(words in message for words in PYDANTIC_WORDING), message


@pytest.mark.parametrize(("zone", "hint"), [("Europe/Berln", "; did you mean 'Europe/Berlin'?"), ("Mars/Olympus", "")])
def test_a_default_zone_that_does_not_exist_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zone: str, hint: str
) -> None:
    """Every command took "Europe/Berln", and readers added after it got UTC; --tz refused it."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[schedule]\ndefault_timezone = "{zone}"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    expected = f"{cfg}: schedule.default_timezone: {zone!r} is not an IANA time zone (e.g. Europe/Berlin){hint}"
    assert str(info.value) == expected
    cfg.write_text("")
    monkeypatch.setenv("DIGESTBOT_SCHEDULE__DEFAULT_TIMEZONE", zone)
    with pytest.raises(ConfigError, match="DIGESTBOT_SCHEDULE__DEFAULT_TIMEZONE"):
        load_settings(cfg)
    monkeypatch.setenv("DIGESTBOT_SCHEDULE__DEFAULT_TIMEZONE", "US/Pacific")  # an alias the zone database has
    assert load_settings(cfg).schedule.default_timezone == "US/Pacific"


def test_a_command_with_a_default_zone_that_does_not_exist_exits_2_in_one_line(tmp_path: Path) -> None:
    from tests.helpers import Cli

    refused = Cli(tmp_path, {"DIGESTBOT_SCHEDULE__DEFAULT_TIMEZONE": "Europe/Berln"})("subscribers", "list", code=2)
    assert refused.stderr.count("\n") == 1 and "schedule.default_timezone" in refused.stderr


def test_numbers_out_of_range_say_the_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGESTBOT_SMTP__PORT", "70000")
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert (
        str(info.value) == "environment variable DIGESTBOT_SMTP__PORT (smtp.port): must be at most 65535, not '70000'"
    )


def test_secrets_are_not_echoed_in_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIGESTBOT_WEB__SIGNING_KEY", '["hunter2-key"]')
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    try:
        load_settings(cfg)
    except ConfigError as exc:
        assert "hunter2" not in str(exc)


def test_the_llm_section_is_off_by_default_and_its_key_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(None)
    assert not settings.llm.enabled and settings.llm.languages == ["en"]
    cfg = tmp_path / "c.toml"
    cfg.write_text('[llm]\napi_key = "sk-hunter2"\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert "llm.api_key is not allowed in the config file" in str(info.value) and "hunter2" not in str(info.value)
    monkeypatch.setenv("DIGESTBOT_LLM__API_KEY", "sk-env-secret")
    monkeypatch.setenv("DIGESTBOT_LLM__BASE_URL", "http://user:pw-secret@127.0.0.1:11434/v1/")
    monkeypatch.setenv("DIGESTBOT_LLM__CHAT_MODEL", "llama3.1:8b")
    settings = load_settings(None)
    assert settings.llm.enabled and settings.llm.base_url == "http://user:pw-secret@127.0.0.1:11434/v1"
    assert settings.llm.resolved_api_key().get_secret_value() == "sk-env-secret"
    shown = str(settings.redacted())
    assert "sk-env-secret" not in shown and "sk-env-secret" not in repr(settings) and "pw-secret" not in shown
    assert settings.redacted()["llm"]["api_key"] == "**********"
    monkeypatch.delenv("DIGESTBOT_LLM__API_KEY")
    key = tmp_path / "llm.key"
    key.write_text("sk-file-secret\n")
    monkeypatch.setenv("DIGESTBOT_LLM__API_KEY_FILE", str(key))
    settings = load_settings(None)
    assert settings.llm.resolved_api_key().get_secret_value() == "sk-file-secret"
    assert "sk-file-secret" not in str(settings.redacted())


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[llm]\nlanguages = ["en", "zh_CN"]\n', "llm.languages: 'zh_CN' is not a BCP 47 language tag"),
        ("[llm]\nlanguages = []\n", "llm.languages: must name at least one language"),
        ('[llm]\nlanguages = ["en", "EN"]\n', "llm.languages: names a language twice"),
        ('[llm]\nbase_url = "ftp://x/v1"\n', "llm.base_url: must be an http(s) URL"),
        ('[llm]\nchat_model = "a model; rm -rf"\n', "llm.chat_model: must be a model's name"),
        ("[llm]\nanswer_seconds = 0\n", "llm.answer_seconds"),
    ],
)
def test_a_bad_llm_setting_is_one_line_naming_it(tmp_path: Path, content: str, expected: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert expected in str(info.value) and "\n" not in str(info.value)
