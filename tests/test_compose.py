"""docker-compose.yml and the Dockerfile stay deployable.

With a docker client that has the compose plugin, ``docker compose config``
validates the file; otherwise (as on the CI machine) the YAML is loaded and the
services, ports, health checks and start order are checked here."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

COMPOSE = ROOT / "docker-compose.yml"


def _has_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="no docker compose plugin here; the YAML checks below still run")
def test_docker_compose_config_accepts_the_file() -> None:
    subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "-q"], check=True, cwd=ROOT)


def test_compose_services_ports_healthchecks_and_order() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"postgres", "mailpit", "migrate", "scheduler", "worker", "web"} <= set(services)
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["postgres"]["volumes"] == ["pgdata:/var/lib/postgresql/data"]
    assert {"1025:1025", "8025:8025"} <= set(services["mailpit"]["ports"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for role in ("scheduler", "worker"):
        assert services[role]["command"] == [role]
        assert services[role]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        env = services[role]["environment"]
        assert env["DIGESTBOT_DATABASE__URL"].startswith("postgresql+psycopg://")
        assert (env["DIGESTBOT_SMTP__HOST"], env["DIGESTBOT_SMTP__PORT"]) == ("mailpit", "1025")
        assert "dumps:/data/dumps" in services[role]["volumes"]
        assert "var:/data/var" in services[role]["volumes"]
    # The worker must be scalable: no fixed container name, no host port.
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]
    assert {"pgdata", "dumps", "var"} <= set(spec["volumes"])
    web = services["web"]
    assert web["command"][0] == "serve" and "8080:8080" in web["ports"]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    assert web["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # Same key volume as the senders: links signed by a worker verify in the web service.
    assert "var:/data/var" in web["volumes"]
    assert web["environment"]["DIGESTBOT_WEB__PUBLIC_URL"].endswith(":8080")


def test_dockerfile_installs_the_package_with_postgres_and_ranking_and_runs_the_cli() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install --no-cache-dir --constraint constraints.txt '.[postgres,taste]'" in dockerfile
    assert "constraints.txt ./" in dockerfile  # copied before it is used
    assert 'ENTRYPOINT ["digestbot"' in dockerfile
    assert "USER digestbot" in dockerfile
