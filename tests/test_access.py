"""laneledger.runtime.access: token files, token → scope, the open mode and its
refusal off loopback, and the services' options (a bad file stops them with
exit status 2 naming it). The HTTP behaviour is in test_tenant_isolation.py."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from laneledger.contract.errors import EntityNotFound, TenantMismatch, Unauthorized
from laneledger.runtime.access import OPEN, AccessPolicy, Scope, announce, is_loopback

REPO = Path(__file__).resolve().parent.parent
ACME = "acme-token-0123456789abcdef"
GLOBEX = "globex-token-0123456789abcdef"
OPERATOR = "operator-token-0123456789abcdef"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_token_file_maps_tokens_and_hashes_to_tenants(tmp_path):
    tokens = write(
        tmp_path,
        "tokens",
        "# readers\n\nacme " + ACME + f"\nglobex sha256:{hashlib.sha256(GLOBEX.encode()).hexdigest()}\n",
    )
    operator = write(tmp_path, "operator", OPERATOR + "\n")
    policy = AccessPolicy.from_files(tokens, operator)
    assert not policy.open and policy.tenants == ["acme", "globex"] and policy.has_operator
    assert policy.scope_of(ACME) == Scope("acme")
    assert policy.scope_of(GLOBEX) == Scope("globex")  # configured by its hash only
    assert policy.scope_of(OPERATOR) == Scope(None, operator=True)
    for token, reason in (
        (None, "missing"),
        ("x" * 40, "invalid"),
        (ACME + "x", "invalid"),
        (f"sha256:{hashlib.sha256(GLOBEX.encode()).hexdigest()}", "invalid"),
    ):
        with pytest.raises(Unauthorized) as caught:
            policy.scope_of(token)
        assert caught.value.details["reason"] == reason


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("acme\n", "tokens:1"),
        ("acme short\n", "tokens:1"),
        ("# ok\nacme " + ACME + "\nglobex a b c\n", "tokens:3"),
        ("acme " + ACME + "\nglobex " + ACME + "\n", "twice"),
    ],
)
def test_a_bad_token_file_is_refused_naming_the_line(tmp_path, text, where):
    with pytest.raises(ValueError, match=where):
        AccessPolicy.from_files(write(tmp_path, "tokens", text), None)


def test_no_file_means_open_and_open_is_loopback_only(caplog):
    policy = AccessPolicy.from_files(None, None)
    assert policy.open and policy.scope_of(None) is OPEN and policy.scope_of("anything") is OPEN
    with caplog.at_level(logging.WARNING, logger="laneledger.runtime.access"):
        announce(policy, "laneledger-tail", "127.0.0.1")  # a warning, not a refusal
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "laneledger-tail: NO ACCESS TOKENS CONFIGURED - every reader on 127.0.0.1 sees every "
        "tenant (set LANELEDGER_TOKENS_FILE / LANELEDGER_OPERATOR_TOKEN_FILE)"
    ]
    for host in ("0.0.0.0", "10.1.2.3", "tail.example"):
        assert not is_loopback(host)
        with pytest.raises(ValueError, match="LANELEDGER_TOKENS_FILE"):
            announce(policy, "laneledger-tail", host)
    assert is_loopback("::1") and is_loopback("localhost")
    announce(AccessPolicy.from_tokens(operator=OPERATOR), "laneledger-tail", "0.0.0.0")


def test_a_scope_narrows_filters_and_hides_other_tenants():
    acme = Scope("acme")
    assert acme.narrow(None) == "acme" and acme.narrow("acme") == "acme"
    with pytest.raises(TenantMismatch) as caught:
        acme.narrow("globex")
    assert caught.value.details == {"what": "token", "parameter": "tenant", "tenant": "globex"}
    with pytest.raises(EntityNotFound) as caught:
        acme.not_found_unless("globex", "lane", id="l1")
    assert caught.value.details == {"kind": "lane", "id": "l1"}
    acme.not_found_unless("acme", "lane", id="l1")
    assert OPEN.narrow("globex") == "globex" and OPEN.narrow(None) is None
    with pytest.raises(EntityNotFound):  # a checkpoint of no tenant: operator only
        acme.not_found_unless(None, "checkpoint", id="c")


def test_services_refuse_a_bad_token_file_or_an_open_public_address(tmp_path):
    bad = write(tmp_path, "tokens", "acme short\n")
    cases = [
        ("laneledger.services.tail", ["--tokens-file", str(bad)], "tokens:1"),
        ("laneledger.services.tail", ["--operator-token-file", str(tmp_path / "absent")], "cannot read"),
        ("laneledger.services.tail", ["--http-host", "0.0.0.0"], "no access token configured"),
        ("laneledger.services.checkpoint", ["--http-host", "0.0.0.0"], "no access token configured"),
    ]
    for service, args, message in cases:
        # No NATS is needed: the options are checked before anything connects.
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                service,
                "--nats",
                "nats://127.0.0.1:1",
                "--data",
                str(tmp_path / "data"),
                "--http-port",
                "0",
                *args,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, (args, result.stderr[-2000:])
        assert message in result.stderr, (args, result.stderr[-2000:])
