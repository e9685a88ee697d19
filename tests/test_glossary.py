"""Words with one meaning: docs/architecture.md keeps a glossary of the domain's words,
and the code keeps "reader" for a subscriber; no two modules and no two classes of the
product share a name (a store module named for the stage it serves aside)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from bot.domain import DigestKind, DigestState, EntryKind, SourceStatus, SubscriberStatus
from tests.conftest import ROOT

WORDS = (
    "subscriber", "reader", "operator", "entry", "paper", "repo", "dump", "feed", "source", "placement", "tag",
    "tag rules", "filter", "named interest", "window", "watermark", "backfill", "left-overs", "digest", "body",
    "planning pass", "ranking", "pick", "taste", "library", "feedback", "model", "outside ranker", "TL;DR",
    "embedding", "budget", "parts", "lease", "on the wire", "bounce", "returned mail", "unsubscribe journal",
    "token", "consent", "whole store", "retention", "scheduler", "worker", "job",
)  # fmt: skip
# Names with "reader" in them that mean a subscriber (the ranker's wire and the taste stage's).
SUBSCRIBER_READERS = {"RankerReader", "ReaderTaste", "ReaderNotActive", "WireReader", "WireReaderScores"}


def glossary() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return text.split("## Glossary", 1)[1]


def test_every_domain_word_is_in_the_glossary() -> None:
    terms = {m.group(1) for m in re.finditer(r"^\| ([^|]+?) \|", glossary(), re.M)}
    assert [word for word in WORDS if word not in terms] == []


def test_every_status_state_and_kind_the_store_spells_is_named() -> None:
    text = glossary()
    spelled = [m.value for kind in (SubscriberStatus, DigestState, DigestKind, EntryKind, SourceStatus) for m in kind]
    assert [value for value in spelled if f"`{value}`" not in text] == []


def _modules() -> list[tuple[str, ast.Module]]:
    found = []
    for path in sorted((ROOT / "bot").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if "/migrations/versions/" not in relative:
            found.append((relative, ast.parse(path.read_text())))
    return found


def test_reader_means_a_subscriber_in_every_module_and_class_name() -> None:
    named = [
        f"{relative}: {node.name}"
        for relative, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and "reader" in node.name.lower() and node.name not in SUBSCRIBER_READERS
    ]
    files = [relative for relative, _ in _modules() if "reader" in relative.rsplit("/", 1)[-1]]
    assert named == [] and files == []


def test_no_two_classes_and_no_two_modules_share_a_name() -> None:
    classes: dict[str, list[str]] = defaultdict(list)
    modules: dict[str, list[str]] = defaultdict(list)
    for relative, tree in _modules():
        name = relative.rsplit("/", 1)[-1].removesuffix(".py")
        if name not in ("__init__", "__main__") and not relative.startswith("bot/store/"):
            modules[name].append(relative)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(relative)
    assert {name: where for name, where in classes.items() if len(where) > 1} == {}
    assert {name: where for name, where in modules.items() if len(where) > 1} == {}
