"""docs/monitoring/ (SPEC §18): the alert rules and the Grafana dashboard load, and name only metrics /metrics serves.

`promtool check rules` validates the rules where it is installed (Debian's
`prometheus` package); without it the rules are still parsed here, and each
expression's metric names are checked against a real scrape.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
NAME = re.compile(r"\bleasehold_[a-z_]+\b")


@pytest.fixture
def served_names(settings) -> set[str]:
    settings.LEASEHOLD_METRICS_TOKEN = "monitoring-test-token-0123"
    text = Client().get("/metrics", headers={"Authorization": "Bearer monitoring-test-token-0123"}).content.decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name, *(sample.name for sample in family.samples)}
    return names


def rule_expressions() -> list[str]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_the_alert_rules_cover_what_operators_page_on():
    names = {
        rule["alert"]
        for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    assert {
        "LeaseholdDeadAgent",
        "LeaseholdQueueWaitHigh",
        "LeaseholdSweepStale",
        "LeaseholdReconcileErrors",
        "LeaseholdWebhookDeadLetters",
    } <= names


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package prometheus)")
def test_promtool_accepts_the_rules():
    done = subprocess.run(
        ["promtool", "check", "rules", str(MONITORING / "alerts.yml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.django_db
def test_rules_and_dashboard_name_only_served_metrics(served_names):
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    expressions = rule_expressions() + [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert dashboard["panels"]
    for expression in expressions:
        for name in NAME.findall(expression):
            assert name in served_names, (name, expression)
