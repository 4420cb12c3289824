"""The docs site's mkdocs hook (mkdocs.yml ``hooks``): what a page shows
that the code already says is generated from the code at build time, so it
cannot drift.

* ``<!-- settings-table:SERVICE -->``: the service's settings table, from
  ``laneledger.services.SERVICE.__main__.SETTINGS`` (the flags and
  variables it reads, their defaults and help).
* ``<!-- rendered-nats-conf -->``: ``deploy/nats.conf`` rendered for the
  tenants of ``deploy/tenants.toml``, exactly as ``laneledger nats-config
  --tenants-file deploy/tenants.toml`` prints it.
* ``<!-- alert-rules -->``: the alert rules of ``deploy/alerts.yml``.
* A Python example's fence info may say ``norun: <reason>`` (the tests do
  not run it, tests/test_doc_examples.py); the site shows it as Python.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_MARKER = re.compile(r"<!-- settings-table:([a-z]+) -->")
NATS_CONF_MARKER = "<!-- rendered-nats-conf -->"
ALERTS_MARKER = "<!-- alert-rules -->"
NORUN_FENCE = re.compile(r"^(\s*```python)\s+norun:.*$", re.M)


def settings_table(service: str) -> str:
    """A Markdown table of what ``laneledger-<service>`` reads."""
    module = importlib.import_module(f"laneledger.services.{service}.__main__")
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for setting in module.SETTINGS:
        flag = f"`{setting.flag}`" + (" (repeatable)" if setting.repeated else "")
        meaning = setting.help.replace("|", "\\|")
        rows.append(f"| `{setting.env}` | {flag} | {shown(setting.default)} | {meaning} |")
    return "\n".join(rows)


def shown(default: object) -> str:
    """A default as its variable would spell it."""
    if default is None or default in ((), []):
        return "unset"
    if isinstance(default, bool):
        return "`on`" if default else "`off`"
    return f"`{default}`"


def rendered_nats_conf() -> str:
    from laneledger.runtime.natsconfig import render
    from laneledger.runtime.tenants import load_tenants

    declared = load_tenants(str(ROOT / "deploy" / "tenants.toml"))
    tenants = list(declared.names)
    text = render(
        (ROOT / "deploy" / "nats.conf").read_text(),
        tenants,
        limits={t: declared.limits_of(t) for t in tenants},
    )
    return f"```\n{text.rstrip()}\n```"


def alert_rules() -> str:
    import yaml

    groups = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())["groups"]
    rows = ["| alert | severity | for | what it says |", "|---|---|---|---|"]
    for rule in (rule for group in groups for rule in group["rules"]):
        text = rule["annotations"]["description"].replace("|", "\\|")
        rows.append(f"| `{rule['alert']}` | {rule['labels']['severity']} | {rule.get('for', '')} | {text} |")
    return "\n".join(rows)


def expand(markdown: str) -> str:
    markdown = SETTINGS_MARKER.sub(lambda m: settings_table(m.group(1)), markdown)
    if NATS_CONF_MARKER in markdown:
        markdown = markdown.replace(NATS_CONF_MARKER, rendered_nats_conf())
    if ALERTS_MARKER in markdown:
        markdown = markdown.replace(ALERTS_MARKER, alert_rules())
    return NORUN_FENCE.sub(r"\1", markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)
