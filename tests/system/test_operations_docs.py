"""docs/operations.md's monitoring snippets work as written: each is parsed, and what it runs exists.

The supervisord program, the systemd unit and the Kubernetes Deployment each run an ``evaljobs``
command line: it is parsed by the real command-line parser (click) with the snippet's environment,
so an option that does not exist, a bad value or a missing required setting fails here. Probes
and scrape targets must point at the ports those commands open; Prometheus' own ``promtool``
checks the scrape configuration.
"""
from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from evaljobs.cli import main as cli

DOC = ROOT / "docs" / "operations.md"
SECTION = "## Monitoring the fleet"


def blocks(language: str) -> list[str]:
    text = DOC.read_text()
    text = text[text.index(SECTION):]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def parse_command(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict:
    """The parameters ``argv`` gives its ``evaljobs`` subcommand (click parses; nothing runs)."""
    assert Path(argv[0]).name == "evaljobs", argv
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    group_ctx = cli.make_context("evaljobs", list(argv[1:]))
    name, command, rest = cli.resolve_command(group_ctx, [*group_ctx._protected_args, *group_ctx.args])
    return command.make_context(name, rest, parent=group_ctx).params


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_supervisord_program_runs_a_real_worker_command(monkeypatch):
    program = next(b for b in blocks("ini") if b.startswith("[program:"))
    parser = configparser.RawConfigParser()
    parser.read_string(program)
    section = parser["program:evaljobs-worker"]
    env = dict(re.findall(r'(\w+)="([^"]*)"', section["environment"]))
    argv = shlex.split(section["command"])
    params = parse_command(argv, env, monkeypatch)
    assert params["broker"] == env["EVALJOBS_BROKER_URL"] and params["health_port"] == 8081
    assert section["stopsignal"] == "TERM" and section["stopasgroup"] == "true"


def test_the_systemd_unit_runs_a_real_worker_command(monkeypatch):
    unit = next(b for b in blocks("ini") if b.startswith("[Unit]"))
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    # systemd repeats Environment=: read each line, not the last one only.
    env = dict(line.split("=", 2)[1:] for line in unit.splitlines() if line.startswith("Environment="))
    parser.read_string(unit)
    argv = shlex.split(parser["Service"]["ExecStart"])
    params = parse_command(argv, env, monkeypatch)
    assert params["db"] == env["EVALJOBS_DATABASE_URL"] and params["log_format"] == "json"
    assert parser["Service"]["KillSignal"] == "SIGTERM" and parser["Install"]["WantedBy"]


def test_the_kubernetes_deployment_probes_and_scales_what_its_worker_serves(monkeypatch):
    deployment, scaled = yaml.safe_load_all(blocks("yaml")[-1])
    assert (deployment["kind"], scaled["kind"]) == ("Deployment", "ScaledObject")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"]
    env = {item["name"]: item["value"] for item in container["env"]}
    params = parse_command(argv, env, monkeypatch)
    health, metrics = params["health_port"], params["metrics_port"]
    assert params["metrics_host"] == "0.0.0.0"  # a probe from the kubelet reaches it
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": health}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": health}
    assert {p["containerPort"] for p in container["ports"]} == {health, metrics}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics)
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    trigger = scaled["spec"]["triggers"][0]
    queues = params["queues"] or ("agents",)
    # The backlog (ready + delayed + in flight, issue 44), not the ready list alone; max over instances.
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] in {f'max(evaljobs_queue_backlog{{queue="{q}"}})' for q in queues}
    assert int(trigger["metadata"]["threshold"]) == params["processes"] * params["threads"]


def test_the_shell_commands_are_real_commands(monkeypatch):
    for block in blocks("bash"):
        for line in block.splitlines():
            if line.startswith("evaljobs "):
                parse_command(shlex.split(line), {"EVALJOBS_BROKER_URL": "redis://redis.internal:6379/0"},
                              monkeypatch)


def test_the_log_line_example_has_every_field():
    example = next(b for b in blocks("json"))
    fields = {"time", "level", "logger", "message", "run", "pair", "worker", "thread"}
    assert set(json.loads(example)) == fields


def test_promtool_accepts_the_scrape_configuration(tmp_path):
    assert shutil.which("promtool"), "promtool comes with Debian's prometheus package (scripts/test has it)"
    config = next(b for b in blocks("yaml") if "scrape_configs" in b)
    path = tmp_path / "prometheus.yml"
    path.write_text(config)
    done = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
