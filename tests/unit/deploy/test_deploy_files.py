"""The deployment files, checked as files (there is no Docker engine in CI).

docker-compose.yml parses and runs Kafka (KRaft), a password-protected Redis, the worker,
Prometheus and Grafana; every ``SR_*`` variable it sets (or shows in a comment) is a real
setting and the active ones load with deploy/config/stream-release.toml; every host path it
mounts exists; the Dockerfile runs a real subcommand and exposes the metrics port; the
pseudonymisation key is a secret that never enters the repository or the image; the Prometheus
alert rules (deploy/prometheus/) use only metrics the worker exports and are mounted where
deploy/prometheus.yml loads them.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel
from support.kafka_broker import kafka_version
from support.paths import REPO

from stream_release.cli.main import _parser
from stream_release.config import ServiceSettings, Settings, load_settings
from stream_release.stream.observability import Metrics

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML is in the test extra (pyproject.toml)
    yaml = None

ROOT = REPO
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CONFIG = ROOT / "deploy" / "config" / "stream-release.toml"
SERVICES = {"kafka", "redis", "stream-release", "prometheus", "grafana"}
SR_LINE = re.compile(r"^\s*(#\s*)?(SR_[A-Z0-9_]+):\s*(\S.*?)\s*$", re.MULTILINE)
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*)|[:?\-][^}]*)?\}")
RULES = ROOT / "deploy" / "prometheus"
DURATION = re.compile(r"^(\d+)([smh])$")


@pytest.fixture(scope="module")
def pyyaml() -> ModuleType:
    if yaml is None:
        pytest.fail(
            "PyYAML is not installed; it is in the test extra: pip install -e '.[test]' "
            "(pip install pyyaml): the deployment files cannot be checked without it",
            pytrace=False,
        )
    return yaml


@pytest.fixture(scope="module")
def compose(pyyaml: ModuleType) -> dict[str, Any]:
    data = pyyaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _substitute(value: str) -> str:
    """``${NAME...}`` replaced as compose would: by its default (``${NAME:-default}``), else
    by a sample value, as with NAME set."""

    def sample(match: re.Match[str]) -> str:
        if match.group(2) is not None:
            return match.group(2)
        return f"sample-{match.group(1).lower().replace('_', '-')}"

    return INTERPOLATION.sub(sample, value)


def _valid_env_names() -> set[str]:
    """``SR_<SECTION>`` and ``SR_<SECTION>_<KEY>`` for every settings section and key (the
    nested delimiter splits once: deeper keys are given as JSON in ``SR_<SECTION>_<KEY>``)."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        section = field.alias or name
        names.add(f"SR_{section}".upper())
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            names.update(f"SR_{section}_{key}".upper() for key in model.model_fields)
    return names


def _clear_sr_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("SR_")]:
        monkeypatch.delenv(name)


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of every bind mount of ``service``."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append((source, target))
    return mounts


def _dockerfile_instruction(name: str) -> str:
    """The argument of the last ``name`` instruction (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = re.findall(rf"^{name}\s+(.+)$", text, re.MULTILINE)
    assert found, f"the Dockerfile has no {name} instruction"
    return found[-1].strip()


# -- docker-compose.yml ---------------------------------------------------------------------


def test_compose_has_every_service(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) >= SERVICES


def test_kafka_runs_in_kraft_mode_as_one_node(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = _environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@kafka:")
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert not [name for name in env if "ZOOKEEPER" in name]
    for name in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[name] == "1", name
    assert kafka["healthcheck"]["test"]


def test_redis_requires_a_password_and_persists(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    command = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    password = command[command.index("--requirepass") + 1]
    assert password.startswith("${REDIS_PASSWORD:?"), "a missing password must stop compose"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert redis["healthcheck"]["test"]


def test_the_worker_waits_for_its_services_and_reads_the_key_from_a_secret(
    compose: dict[str, Any],
) -> None:
    worker = compose["services"]["stream-release"]
    assert worker["build"] in (".", {"context": "."})
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "redis" in worker["depends_on"]
    env = _environment(worker)
    assert env["SR_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["SR_REDIS_URL"].startswith("redis://:${REDIS_PASSWORD")
    assert env["SR_REDIS_URL"].endswith("@redis:6379/0")
    assert "SR_HISTORY_KEY" not in env, "the key belongs in a secret, not the environment"
    secret = env["SR_HISTORY_KEY_FILE"].removeprefix("/run/secrets/")
    assert secret in worker["secrets"]
    key_file = Path(compose["secrets"][secret]["file"])
    assert key_file.parts[:2] == ("deploy", "secrets")
    gitignore = (ROOT / ".gitignore").read_text().split()
    assert "deploy/secrets/" in gitignore, "the pseudonymisation key must never be committed"
    archive = env["SR_SERVICE_ARCHIVE"]
    private = env["SR_SERVICE_PRIVATE_ARCHIVE"]
    assert archive != private and not private.startswith(archive + "/")
    volumes = {str(v).rpartition(":")[2]: str(v).partition(":")[0] for v in worker["volumes"]}
    # public and private files on volumes of their own: the public one can be shared whole
    assert volumes[archive] != volumes[private]
    assert {volumes[archive], volumes[private]} <= set(compose["volumes"])
    # the series ledger outside both archives: a restore of them does not take it back
    ledger = env["SR_OUTPUT_LEDGER"]
    assert volumes[ledger.rpartition("/")[0]] not in {volumes[archive], volumes[private]}
    assert volumes[ledger.rpartition("/")[0]] in compose["volumes"]
    assert int(env["SR_SERVICE_METRICS_PORT"]) == ServiceSettings().metrics_port


def test_every_sr_variable_in_compose_is_a_setting(compose: dict[str, Any]) -> None:
    valid = _valid_env_names()
    shown = [m.group(2) for m in SR_LINE.finditer(COMPOSE.read_text(encoding="utf-8"))]
    assert len(shown) >= 5
    unknown = sorted(set(shown) - valid)
    assert not unknown, f"not settings (SR_<SECTION>_<KEY>): {unknown}"
    active = _environment(compose["services"]["stream-release"])
    assert not sorted(n for n in active if n.startswith("SR_") and n not in valid)


def test_the_compose_environment_loads_with_the_example_config(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_sr_env(monkeypatch)
    for name, value in _environment(compose["services"]["stream-release"]).items():
        monkeypatch.setenv(name, _substitute(value))
    settings = load_settings(CONFIG)
    assert settings.kafka.bootstrap == "kafka:9092"
    assert settings.redis.url == "redis://:sample-redis-password@redis:6379/0"
    assert settings.history.key_file == Path("/run/secrets/pseudonym_key")
    assert settings.service.archive == Path("/archive")
    assert settings.service.private_archive == Path("/archive-private")
    assert settings.output.ledger == Path("/ledger/series.ledger")
    assert settings.service.metrics_port == ServiceSettings().metrics_port


def test_the_commented_security_examples_load_together(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_sr_env(monkeypatch)
    env = _environment(compose["services"]["stream-release"])
    commented = {
        m.group(2): m.group(3)
        for m in SR_LINE.finditer(COMPOSE.read_text(encoding="utf-8"))
        if m.group(1)
    }
    assert {"SR_KAFKA_SECURITY_PROTOCOL", "SR_KAFKA_SASL_USERNAME", "SR_REDIS_URL"} <= set(
        commented
    )
    for name, value in {**env, **commented}.items():
        monkeypatch.setenv(name, _substitute(value))
    settings = load_settings(CONFIG)
    assert settings.kafka.security_protocol == "SASL_SSL"
    assert settings.kafka.sasl_password is not None
    assert settings.redis.url.startswith("rediss://")


def test_every_mounted_host_path_exists(compose: dict[str, Any]) -> None:
    missing = [
        f"{name}: {source}"
        for name, service in compose["services"].items()
        for source, _ in _bind_mounts(service)
        if not (ROOT / source).exists()
    ]
    assert not missing, f"mounted but not in the repository: {missing}"


def test_grafana_and_prometheus_files_agree_with_compose(
    compose: dict[str, Any], pyyaml: ModuleType
) -> None:
    services = compose["services"]
    grafana = dict(_bind_mounts(services["grafana"]))
    provider = pyyaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/dashboards/dashboards.yml").read_text()
    )
    paths = [p["options"]["path"] for p in provider["providers"]]
    assert grafana["./deploy/grafana/dashboards"] in paths
    assert grafana["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    dashboards = sorted((ROOT / "deploy/grafana/dashboards").glob("*.json"))
    assert dashboards
    for dashboard in dashboards:
        json.loads(dashboard.read_text())
    prometheus = dict(_bind_mounts(services["prometheus"]))
    assert prometheus["./deploy/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    scrape = pyyaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    targets = [
        f"{name}:{c['port']}"
        for job in scrape["scrape_configs"]
        for c in job["dns_sd_configs"]
        for name in c["names"]
    ]  # every replica of the service, by compose's DNS
    assert f"stream-release:{ServiceSettings().metrics_port}" in targets


def _alert_rules(pyyaml: ModuleType) -> dict[str, dict[str, Any]]:
    """Every alerting rule of deploy/prometheus/*.yml, by alert name."""
    return {
        rule["alert"]: rule
        for path in sorted(RULES.glob("*.yml"))
        for group in pyyaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
    }


def test_alert_rules_use_only_metrics_the_worker_exports(pyyaml: ModuleType) -> None:
    exported = {family.name for family in Metrics().registry.collect()}
    rules = _alert_rules(pyyaml)
    assert rules
    for name, rule in rules.items():
        used = {m.removesuffix("_total") for m in re.findall(r"\bsr_[a-z_]+", rule["expr"])}
        scraped = 'up{job="stream-release"}' in rule["expr"]  # Prometheus's own, of the job
        assert used or scraped, name
        assert used <= exported, f"{name}: {sorted(used - exported)} not exported"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_every_alert_has_a_runbook_entry(pyyaml: ModuleType) -> None:
    runbook = ROOT / "docs" / "runbook.md"
    headings = {
        line.removeprefix("## ").strip().lower()
        for line in runbook.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    for name, rule in _alert_rules(pyyaml).items():
        assert rule["annotations"]["runbook_url"] == f"docs/runbook.md#{name.lower()}", name
        assert name.lower() in headings, f"docs/runbook.md has no section {name}"
    assert headings == {name.lower() for name in _alert_rules(pyyaml)}  # none stale


def test_the_job_scraped_is_the_one_the_alerts_watch(pyyaml: ModuleType) -> None:
    scrape = pyyaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    jobs = {job["job_name"] for job in scrape["scrape_configs"]}
    assert jobs == {"stream-release"}


def test_the_seal_alert_waits_as_long_as_the_worker_before_its_log_line(
    pyyaml: ModuleType,
) -> None:
    rule = _alert_rules(pyyaml)["StreamReleaseSealIncomplete"]
    assert rule["expr"].split()[0] == "sr_seal_incomplete"
    number, unit = DURATION.fullmatch(rule["for"]).groups()  # type: ignore[union-attr]
    seconds = int(number) * {"s": 1, "m": 60, "h": 3600}[unit]
    assert seconds == ServiceSettings().seal_alert_after_s
    assert "{{ $labels.release }}" in rule["annotations"]["summary"]


def test_prometheus_is_given_every_rule_file(compose: dict[str, Any], pyyaml: ModuleType) -> None:
    scrape = pyyaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    mounts = _bind_mounts(compose["services"]["prometheus"])
    loaded = set()
    for name in scrape["rule_files"]:
        in_container = Path(name)
        host = [
            (ROOT / source / in_container.relative_to(target)).resolve()
            for source, target in mounts
            if in_container.is_relative_to(target)
        ]
        assert host, f"{name} (rule_files) is not mounted into the prometheus container"
        loaded.add(host[0])
    assert loaded == {path.resolve() for path in RULES.glob("*.yml")}


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_sr_env(monkeypatch)
    monkeypatch.setenv("SR_HISTORY_KEY", "deploy-test-key-0123456789abcdef")
    settings = load_settings(CONFIG)
    assert settings.schema.qid
    assert settings.service.metrics_port == ServiceSettings().metrics_port


def test_the_example_config_publishes_a_year_of_the_bundled_data(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shipped settings are feasible on the data the package ships: twelve monthly Adult
    snapshots with paper §8's churn, every occupation protected, no group below 2."""
    from stream_release.audit import audit_directory
    from stream_release.devtools.datasets import ADULT_SENSITIVE, bundled_adult, make_series
    from stream_release.pipeline.anonymize import anonymize_files

    _clear_sr_env(monkeypatch)
    settings = load_settings(CONFIG, history={"key": "deploy-test-key-0123456789abcdef"})
    assert settings.privacy.min_group_size >= 2
    paths = []
    for i, table in enumerate(make_series(bundled_adult(), ADULT_SENSITIVE, 12), start=1):
        paths.append(tmp_path / f"2026-{i:02d}.csv")
        table.write_csv(paths[-1])
    manifests = anonymize_files(settings, tmp_path / "out", paths)
    assert [m["sequence"] for m in manifests] == list(range(1, 13))
    assert all(m["utility"]["min_group_size"] >= 2 for m in manifests)
    # measured: 0.92 % of the rows suppressed on average, 3.31 % at most (six other keys:
    # 0.64-0.88 % and 1.08-2.64 %)
    shares = [m["suppressed"] / m["records_in"] for m in manifests]
    assert sum(shares) / len(shares) < 0.015 and max(shares) < 0.04
    assert audit_directory(tmp_path / "out").ok


# -- Dockerfile ---------------------------------------------------------------------------


def test_the_image_runs_a_real_subcommand(compose: dict[str, Any]) -> None:
    entrypoint = json.loads(_dockerfile_instruction("ENTRYPOINT"))
    command = json.loads(_dockerfile_instruction("CMD"))
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["stream-release"] and "stream-release" in scripts
    for argv in (command, compose["services"]["stream-release"]["command"]):
        args = _parser().parse_args(argv)  # exits (fails the test) on an unknown command
        assert args.command == "worker"
        mounts = _bind_mounts(compose["services"]["stream-release"])
        host = [
            ROOT / source / Path(str(args.config)).relative_to(target)
            for source, target in mounts
            if Path(str(args.config)).is_relative_to(target)
        ]
        assert host and host[0].resolve() == CONFIG, "the config is not mounted where CMD reads it"


def test_the_image_exposes_the_metrics_port_with_a_health_check() -> None:
    assert _dockerfile_instruction("FROM").startswith("python:3.11-slim")
    assert int(_dockerfile_instruction("EXPOSE")) == ServiceSettings().metrics_port
    health = _dockerfile_instruction("HEALTHCHECK")
    assert "urllib" in health and "/health" in health
    assert str(ServiceSettings().metrics_port) in health
    user = _dockerfile_instruction("USER")
    assert user not in ("root", "0")


def test_the_build_context_leaves_out_secrets_and_caches() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for entry in (".git", "deploy", "tests", "**/__pycache__"):
        assert entry in ignored, entry
    assert "README.md" not in ignored and "pyproject.toml" not in ignored  # the build needs them


def test_compose_runs_the_kafka_the_tests_run(compose: dict[str, Any]) -> None:
    # users run the broker of docker-compose.yml; the tests resolve tests/kafka/pom.xml
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{kafka_version()}"


def test_compose_file_follows_the_compose_specification() -> None:
    """check-jsonschema's vendored Compose Specification schema (no network), as ``docker
    compose config`` would check it; a Docker engine is not needed."""
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_module_the_image_imports_exists() -> None:
    # a RUN line that imports a module of the package (the kernels' warm-up) fails the build
    # when the module moves; nothing else would notice
    modules = re.findall(r"from (stream_release[\w.]*) import (\w+)", DOCKERFILE.read_text())
    assert modules, "the Dockerfile compiles the kernels at build time"
    for module, name in modules:
        assert hasattr(importlib.import_module(module), name), f"{module}.{name}"
