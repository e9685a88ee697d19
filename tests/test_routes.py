"""One route table (bot.domain.routes): the endpoint serves exactly the routes it names,
and no other module or template spells a path; links are built from the table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from starlette.routing import Route as StarletteRoute

from bot.domain.routes import MANAGE, RATING, ROUTES, WEB_VERSION, WEB_VERSIONS, Route, base_path
from bot.store.engine import make_engine, sessions
from bot.unsubscribes import close_journal
from bot.web.app import create_app
from tests.conftest import ROOT
from tests.helpers import settings_for

NEVER_SERVED = {"feed_identity", "web_versions"}  # an id's seed; the prefix a digest's links extend
# A path's start as it would be spelled by hand: a route's literal prefix, not inside a longer name.
SPELLED = [re.compile(r"(?<![\w./-])" + re.escape(route.prefix.rstrip("/")) + r"(?:/|\b)") for route in ROUTES]


def served_patterns(tmp_path: Path, migrated_sqlite: Path) -> set[str]:
    store = tmp_path / "store.sqlite3"
    store.write_bytes(migrated_sqlite.read_bytes())
    engine = make_engine(f"sqlite:///{store}")
    try:
        settings = settings_for(tmp_path, site=True, web={"signup": True}, metrics={"listen_port": 0})
        app = create_app(settings, sessions(engine))
        return {route.path for route in app.routes if isinstance(route, StarletteRoute)}
    finally:
        close_journal(engine.url.render_as_string(hide_password=False))
        engine.dispose()


def test_the_endpoint_serves_exactly_the_routes_of_the_table(tmp_path: Path, migrated_sqlite: Path) -> None:
    served = served_patterns(tmp_path, migrated_sqlite)
    named = {route.pattern for route in ROUTES if route.name not in NEVER_SERVED}
    assert served == named


def literal_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module but its docstrings (which describe paths)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def spelled_paths(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "bot").rglob("*.py")):
        if path == root / "bot" / "domain" / "routes.py" or "migrations" in path.parts:
            continue
        for line, text in literal_strings(path):
            if any(pattern.search(text) for pattern in SPELLED):
                found.append(f"{path.relative_to(root)}:{line}: {text!r}")
    for path in sorted((root / "templates").rglob("*.j2")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            # a link written by hand: a literal path in an attribute, or one after a placeholder
            for value in re.findall(r'(?:href|action|src)="([^"]*)"', line):
                if value and not value.startswith(("{{", "#", "?", "mailto:", "cid:")):
                    found.append(f"{path.relative_to(root)}:{number}: {value!r}")
            found += [f"{path.relative_to(root)}:{number}: {m!r}" for m in re.findall(r"\}\}/[\w./-]*", line)]
    return found


def test_no_module_or_template_spells_a_path() -> None:
    assert spelled_paths(ROOT) == []


def test_a_path_spelled_by_hand_is_found(tmp_path: Path) -> None:
    (tmp_path / "bot" / "domain").mkdir(parents=True)
    (tmp_path / "templates").mkdir()
    (tmp_path / "bot" / "domain" / "routes.py").write_text('"""Table."""\nX = "/m/{token}"\n')
    (tmp_path / "bot" / "page.py").write_text('"""Says /u/ in its docstring: fine."""\nLINK = f"{1}/u/{2}"\n')
    (tmp_path / "templates" / "a.html.j2").write_text('<a href="../m/{{ token }}">x</a> {{ web_url }}/more\n')
    assert [line.split(": ")[0] for line in spelled_paths(tmp_path)] == [
        "bot/page.py:2",
        "templates/a.html.j2:1",
        "templates/a.html.j2:1",
    ]


def test_a_route_is_filled_field_by_field_and_refuses_other_fields() -> None:
    assert MANAGE.url("https://example.org/digest/", token="12.a_b-c") == "https://example.org/digest/m/12.a_b-c"
    assert MANAGE.path(token="a/b?c") == "/m/a%2Fb%3Fc"  # a value is one segment, whatever it holds
    assert RATING.below(WEB_VERSIONS, day="2026-06-14", ref=3, verdict="more") == "/2026-06-14/3/more"
    assert WEB_VERSION.below(WEB_VERSIONS, day="2026-06-14.bib") == "/2026-06-14.bib"
    with pytest.raises(TypeError):
        MANAGE.path(tok="x")
    with pytest.raises(ValueError):
        MANAGE.below(WEB_VERSIONS)
    assert base_path("https://example.org/digest/") == "/digest" and base_path("") == ""
    assert len({route.name for route in ROUTES}) == len(ROUTES) and all(isinstance(r, Route) for r in ROUTES)


def test_a_page_links_under_the_endpoints_own_path_whatever_host_it_was_reached_by() -> None:
    from bot.web.pages import page_link

    behind_a_proxy = page_link("https://example.org/digest/")
    assert behind_a_proxy("manage", token="1.x") == "/digest/m/1.x"
    assert behind_a_proxy("signup") == "/digest/subscribe"
    assert page_link("")("feed", token="1.x") == "/f/1.x.atom"
    with pytest.raises(KeyError):
        behind_a_proxy("nowhere")
