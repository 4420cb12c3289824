"""``nats-config``: deploy/nats.conf rendered with a producer user per tenant
(``laneledger.runtime.natsconfig``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from laneledger.cli.report import fail
from laneledger.runtime.natsconfig import render
from laneledger.runtime.tenants import Tenants, TenantsFileError, load_tenants


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub = commands.add_parser(
        "nats-config",
        help="render deploy/nats.conf with a least-privilege NATS account per tenant",
        description="Print the nats-server config TEMPLATE (default deploy/nats.conf) with, for "
        "each --tenant, an account tenant-<tenant> holding a user producer-<tenant> (password "
        "$LANELEDGER_PRODUCER_<TENANT>_PASSWORD) that may append, send commands and checkpoint "
        "requests only for its tenant, read only its own inbox (_INBOX_<tenant>) and use only its "
        "own blob and artifact buckets (connect its clients with LedgerClient.connect(url, "
        "tenant=...)), limited in connections and subscriptions by the tenants file, the "
        "sequencer and checkpoint service allowed to answer on those inboxes, and the shared "
        "producer to read them (LANELEDGER_TENANT_INBOXES=on).",
    )
    sub.add_argument(
        "--tenant",
        action="append",
        default=[],
        metavar="TENANT",
        help="a tenant (repeat for each); letters, digits, '_' and '-'",
    )
    sub.add_argument(
        "--tenants-file",
        metavar="FILE",
        help="the tenants file (deploy/tenants.toml) the services read too: a user for each tenant in it",
    )
    sub.add_argument(
        "--korg-tenant", default="korg", help="the Korg tenant: the ingest service's one append subject"
    )
    sub.add_argument("--template", default="deploy/nats.conf", help="the config to render")
    sub.add_argument("-o", "--output", help="write here instead of stdout")
    sub.set_defaults(run=cmd_nats_config)


def cmd_nats_config(args: argparse.Namespace) -> int:
    try:
        declared = load_tenants(args.tenants_file) if args.tenants_file else Tenants({})
    except TenantsFileError as exc:
        return fail(str(exc))
    tenants = list(dict.fromkeys([*args.tenant, *declared.names]))
    template = Path(args.template).read_text()
    try:
        text = render(
            template,
            tenants,
            korg_tenant=args.korg_tenant,
            limits={t: declared.limits_of(t) for t in tenants},
        )
    except ValueError as exc:
        return fail(f"{args.template}: {exc}")
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
