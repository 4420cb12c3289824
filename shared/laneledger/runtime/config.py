"""Service settings: every option is a flag with an environment variable
behind it, all named ``LANELEDGER_*`` (docs/settings.md lists them, generated from each service's settings).

A value that does not parse stops the service before it starts: exit status
2 and one line naming the variable (or flag) and what was wrong with it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from laneledger.runtime.tenants import load_tenants
from laneledger.sdk.natsconnect import DEFAULT_NATS, checked_nats

PREFIX = "LANELEDGER_"


class Setting:
    """One option: ``--flag`` with the environment variable ``LANELEDGER_<ENV>``.
    ``repeated``: the flag may be given several times, the variable holds
    whitespace-separated values; either way ``parse`` reads each value and
    the setting is their tuple."""

    def __init__(
        self,
        flag: str,
        env: str,
        default: Any,
        parse: Callable[[str], Any] = str,
        help: str = "",
        *,
        repeated: bool = False,
    ) -> None:
        self.flag, self.env, self.default, self.parse, self.help = flag, PREFIX + env, default, parse, help
        self.repeated = repeated

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("a port is 0..65535 (0: pick a free one)")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError("must be on or off")
    return text == "on"


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("must be greater than 0")
    return value


def common_settings(service: str, default_port: int) -> list[Setting]:
    """What every service has: where NATS is, the subject prefix, its HTTP port."""
    name = service.upper()
    return [
        Setting(
            "--nats",
            "NATS_URL",
            DEFAULT_NATS,
            checked_nats,
            help="NATS server URL, or several comma-separated (the nodes of a cluster)",
        ),
        Setting("--prefix", "PREFIX", "ledger", help="subject prefix"),
        Setting("--http-host", "HTTP_HOST", "127.0.0.1", help="address for /healthz, /readyz, /metrics"),
        Setting("--http-port", f"{name}_PORT", default_port, port, help="HTTP port (0: pick a free one)"),
    ]


def reply_nats_setting(service: str) -> Setting:
    """For a service that answers requesters (the sequencer, the checkpoint
    service): the connection its receipts and replies leave on."""
    return Setting(
        "--reply-nats",
        "REPLY_NATS_URL",
        None,
        checked_nats,
        help=(
            "NATS URL(s) for receipts and replies, as a user that may publish to inboxes only "
            f"(deploy/nats.conf: {service}-replies); unset: the --nats connection"
        ),
    )


def tenants_setting() -> Setting:
    """For the services that enforce tenants' limits (the sequencer, the
    checkpoint service): the tenants file (``laneledger.runtime.tenants``)."""
    return Setting(
        "--tenants-file",
        "TENANTS_FILE",
        None,
        load_tenants,
        help="the tenants file (deploy/tenants.toml): declared tenants and their limits; unset: no limits",
    )


def parse_settings(
    prog: str, description: str | None, settings: Sequence[Setting], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Flags win over environment variables, which win over defaults. Exits
    with status 2 naming the variable or flag when a value does not parse."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for setting in settings:
        parser.add_argument(
            setting.flag,
            default=None,
            action="append" if setting.repeated else "store",
            help=f"{setting.help} (env {setting.env}, default {setting.default!r})",
        )
    args = parser.parse_args(argv)
    for setting in settings:
        given = getattr(args, setting.dest)
        source, text = (
            (setting.flag, given) if given is not None else (setting.env, os.environ.get(setting.env))
        )
        if text is None:
            setattr(args, setting.dest, setting.default)
            continue
        try:
            if setting.repeated:
                values = text.split() if isinstance(text, str) else text
                setattr(args, setting.dest, tuple(setting.parse(value) for value in values))
            else:
                setattr(args, setting.dest, setting.parse(text))
        except ValueError as exc:
            print(f"{prog}: {source}={text!r}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    return args
