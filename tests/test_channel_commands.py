"""Channels as an operator runs them: ``channels add``, ``list``, ``edit``, ``test`` and
``remove`` on the command line, the destination never printed, logged or stored in
clear, and ``digestbot run`` posting a channel's digest beside the mail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.tools.sink import Sink, SinkHandler
from tests.chat_servers import ChatServers
from tests.conftest import SEEDS
from tests.helpers import Cli, daemon_env, daemon_until

SECRET = "Wh00kS3cr3tPart"


def test_the_channel_commands_never_show_the_destination(tmp_path: Path, chat: ChatServers) -> None:
    cli = Cli(tmp_path)
    url = tmp_path / "lab.url"
    url.write_text(f"{chat.url}/api/webhooks/1234/{SECRET}\n")
    added = cli("channels", "add", "lab", "--destination-file", str(url), "--service", "discord", "--filter", "llm")
    assert "added channel lab: discord at 127.0.0.1" in added.stdout
    listed = cli("channels", "list", "--json").stdout
    assert json.loads(listed.splitlines()[0])["filter"] == "llm"
    said = cli("channels", "test", "lab").stdout
    assert "lab: posted" in said
    assert chat.received()[0]["service"] == "discord"
    cli("channels", "edit", "lab", "--hour", "7")
    assert json.loads(cli("channels", "list", "--json").stdout)["send_hour"] == 7
    everything = "".join(
        cli(*command).stdout
        for command in (("channels", "list"), ("subscribers", "export"), ("config", "show"), ("history",))
    )
    assert SECRET not in everything
    store = next(tmp_path.glob("**/*.sqlite3")).read_bytes()
    assert SECRET.encode() not in store
    cli("db", "backup", str(tmp_path / "backup.sqlite3"))
    assert SECRET.encode() not in (tmp_path / "backup.sqlite3").read_bytes()  # sealed there too
    assert cli("channels", "add", "lab", "--destination-file", str(url), "--service", "discord", code=2)
    refused = cli("channels", "add", "Bad Name", "--destination-file", str(url), code=2)
    assert "not a channel name" in refused.stderr and SECRET not in refused.stderr
    plain = tmp_path / "plain.url"
    plain.write_text(f"http://chat.example.org/hooks/{SECRET}")
    refused = cli("channels", "add", "two", "--destination-file", str(plain), "--service", "mattermost", code=2)
    assert "loopback" in refused.stderr and SECRET not in refused.stderr
    cli("channels", "remove", "lab")
    assert "no channels" in cli("channels", "list").stdout
    assert cli("channels", "test", "lab", code=1)


@pytest.mark.slow
def test_the_daemon_posts_a_channels_digest_beside_the_mail(tmp_path: Path, chat: ChatServers) -> None:
    with Sink(SinkHandler()) as sink:
        env = daemon_env(tmp_path, "c.sqlite3", SEEDS, sink.port)
        cli = Cli(tmp_path, env, placed=False)
        cli("subscribers", "add", "ada@example.org", "--tz", "UTC", "--hour", "0", "--backfill", "all")
        url = tmp_path / "lab.url"
        url.write_text(f"{chat.url}/bot123:{SECRET}?chat_id=-1002")
        cli(
            "channels",
            "add",
            "lab",
            "--destination-file",
            str(url),
            "--service",
            "telegram",
            "--hour",
            "0",
            "--tz",
            "UTC",
            "--backfill",
            "all",
        )
        logged = daemon_until(tmp_path, cli.env, lambda: bool(sink.received) and bool(chat.received()))
    assert "Traceback" not in logged and SECRET not in logged, logged
    assert [r.recipients for r in sink.received] == [["ada@example.org"]]  # the channel got no mail
    received = chat.received()
    assert received and {r["service"] for r in received} == {"telegram"}
    history = cli("history").stdout
    assert "lab@channels.invalid" in history
