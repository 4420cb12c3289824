"""Per-tenant NATS accounts: ``deploy/nats.conf`` rendered for a list of tenants.

nats-server's plain-config users have fixed permissions (the ``{{tag()}}``
permission templates exist only for JWT users issued with nsc), so per-tenant
access is rendered: the shipped ``deploy/nats.conf`` is the template, and
``laneledger nats-config --tenant acme --tenant globex`` prints it with, for
each tenant, an account ``tenant-<tenant>`` holding one user
``producer-<tenant>`` (password ``$LANELEDGER_PRODUCER_<TENANT>_PASSWORD``).

Why an account, not only a user with narrow permissions in the ledger's
account: whoever sends a request chooses its reply subject, and JetStream
answers its API calls (and acknowledges publishes) on its own internal
connection, which no user permission restricts. A tenant user in the ledger's
account could send ``$JS.API.STREAM.INFO.<its bucket>`` with the reply
``ledger.events.<…>`` and have JetStream write a foreign message into the
committed stream, or into another tenant's inbox. Across an account import the
server replaces the reply subject with one of its own (``_R_.…``) and maps the
answer back, so a tenant reaches nothing but what its account imports. An
account also carries what a plain user cannot: connection and subscription
limits (``max_connections``, ``max_subscriptions`` in the tenants file).

A tenant's account imports from ``LEDGER`` (``tenant_grants``):

* the services on its own subjects: appends on ``<prefix>.append.<tenant>.>``
  (JetStream stores them in the tenant's append stream, in ``LEDGER``),
  commands on ``<prefix>.cmd.<tenant>.*`` and checkpoint requests on
  ``<prefix>.checkpoint.<tenant>.*``, which the sequencer and the checkpoint
  service answer for that tenant alone;
* its reply inbox ``_INBOX_<tenant>.>``, where receipts and replies arrive,
  as a stream: no other tenant imports it;
* the JetStream calls on its own buckets, under
  ``subjects.TENANT_JS_API_PREFIX`` (``JS.LEDGER.API.<call>``, the prefix its
  client uses): uploads into ``LEDGER_UPLOADS_<tenant>`` (info, read by
  message, write, purge: nats-py clears a failed put), checkpoint artifacts in
  ``LEDGER_CHECKPOINT_ARTIFACTS_<tenant>`` (info, read, write), and reading
  the committed ``LEDGER_BLOBS_<tenant>``, which only the sequencer writes (it
  copies an upload there before an append referencing it commits, so no
  producer can delete or overwrite a committed blob). No consumer creation: a
  push consumer delivers where its creator says (objectstores.read_chunks).

The template must fsync JetStream on every write (``sync_interval:
always`` in its ``jetstream`` block, spec/replication.md "Durability"): a
rendered file that would acknowledge what a power cut can take back is
refused (``TemplateError``).

The account has no JetStream of its own. In ``LEDGER`` the renderer also lets
the reply users (``sequencer-replies``, ``checkpoint-replies``) publish on
the tenants' inboxes, the shared ``producer`` subscribe to them (with a
tenants file a tenant's receipts go there only), the checkpoint service
create and read each tenant's artifact bucket, the tail read each tenant's
committed blobs, and the sequencer write them. The shared ``producer`` user
stays in ``LEDGER``, for a trusted harness that writes for several tenants.
``--korg-tenant`` renders the grants for the Korg tenant (``korg`` in the
template): the ingest service's appends and commands, its receipts inbox
(``_INBOX_korg``) and its blob buckets (the ingest uploads, the sequencer
copies, the tail reads). The ingest may also send each rendered tenant's
``erase`` and ``ensure_actor`` commands: a tenant's erasures over HTTP, with
its token (spec/erasure.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from laneledger.contract.subjects import TENANT_JS_API_PREFIX, inbox_prefix, tenant_bucket, token
from laneledger.runtime.tenants import TENANT_NAME, TenantLimits

LEDGER_ACCOUNT = "LEDGER"
_INBOX_ALLOW = '"_INBOX.>"'
# The users receipts and replies leave on (the services' --reply-nats): the
# only ones that publish on producers' inboxes.
RESPONDERS = ("sequencer-replies", "checkpoint-replies")
# The trusted harness's user: with a tenants file it receives a tenant's
# receipts in that tenant's inbox (LedgerClient(tenant_inboxes=True)).
TRUSTED_PRODUCER = "producer"
ARTIFACTS = "LEDGER_CHECKPOINT_ARTIFACTS"  # the shared bucket; a tenant's is ARTIFACTS_<tenant>
BLOBS = "LEDGER_BLOBS"  # likewise for committed content-reference blobs
UPLOADS = "LEDGER_UPLOADS"  # a tenant's uploads bucket is UPLOADS_<tenant>; there is no shared one
_SEQUENCER_API = '"$JS.API.>"'
# What the ingest service sends on any rendered tenant's subjects: its erasures.
INGEST_TENANT_COMMANDS = ("erase", "ensure_actor")
_JS_API = "$JS.API."
_SYNC_ALWAYS = re.compile(r"(?m)^\s*(?:sync_interval|sync)\s*[:=]\s*\"?always\"?\s*(?:#.*)?$")


def _bucket_permission(bucket: str) -> re.Pattern[str]:
    """A permission on a shared bucket: its stream OBJ_<bucket> or its $O.<bucket> subjects."""
    return re.compile(r'"[^"]*(?:OBJ_|\$O\.)' + bucket + r'(?:\.[^"]*)?"')


_ARTIFACT_PERMISSION = _bucket_permission(ARTIFACTS)
_BLOB_PERMISSION = _bucket_permission(BLOBS)


class TemplateError(ValueError):
    """The template lacks a part the renderer needs (a user, a subject)."""


@dataclass(frozen=True)
class Grant:
    """One thing ``LEDGER`` exports to a tenant's account: a service the
    tenant calls (``subject`` in ``LEDGER``, ``local`` in the tenant's
    account) or a stream it receives."""

    kind: str  # "service" or "stream"
    subject: str
    local: str


def account_name(tenant: str) -> str:
    return f"tenant-{tenant}"


def tenant_grants(tenant: str, prefix: str = "ledger") -> list[Grant]:
    """Everything a tenant's account imports from ``LEDGER`` (the module text)."""
    t = token(tenant)
    grants = [
        Grant("service", subject, subject)
        for subject in (f"{prefix}.append.{t}.>", f"{prefix}.cmd.{t}.*", f"{prefix}.checkpoint.{t}.*")
    ]
    grants.append(Grant("stream", f"{inbox_prefix(tenant)}.>", f"{inbox_prefix(tenant)}.>"))

    def api(call: str, bucket: str) -> Grant:
        return Grant(
            "service", f"{_JS_API}{call}.OBJ_{bucket}", f"{TENANT_JS_API_PREFIX}.{call}.OBJ_{bucket}"
        )

    uploads, artifacts, blobs = (tenant_bucket(b, tenant) for b in (UPLOADS, ARTIFACTS, BLOBS))
    for bucket, calls, writes in (
        (uploads, ("STREAM.INFO", "STREAM.MSG.GET", "STREAM.PURGE"), True),
        (artifacts, ("STREAM.INFO", "STREAM.MSG.GET"), True),
        (blobs, ("STREAM.INFO", "STREAM.MSG.GET"), False),
    ):
        grants += [api(call, bucket) for call in calls]
        if writes:
            grants.append(Grant("service", f"$O.{bucket}.>", f"$O.{bucket}.>"))
    return grants


def _user_block(text: str, user: str) -> re.Match[str]:
    found = re.search(r"(?ms)^( *)\{\n *user: " + re.escape(user) + r"\n.*?^\1\}\n", text)
    if found is None:
        raise TemplateError(f"the template has no user {user!r}")
    return found


def _replace_in_user(text: str, user: str, old: str, new: str) -> str:
    block = _user_block(text, user)
    return text[: block.start()] + block.group(0).replace(old, new, 1) + text[block.end() :]


def password_variable(tenant: str) -> str:
    return f"LANELEDGER_PRODUCER_{tenant.upper().replace('-', '_')}_PASSWORD"


def render(
    template: str,
    tenants: Sequence[str] = (),
    *,
    korg_tenant: str = "korg",
    prefix: str = "ledger",
    limits: Mapping[str, TenantLimits] | None = None,
) -> str:
    """The template with an account per tenant (see the module text);
    ``limits`` (by tenant; default ``TenantLimits()``) gives each account
    its connection and subscription limits."""
    for tenant in (*tenants, korg_tenant):
        if not TENANT_NAME.match(tenant):
            raise ValueError(f"tenant {tenant!r}: letters, digits, '_' and '-', at most 64")
    if not _SYNC_ALWAYS.search(template):
        raise TemplateError("the template's jetstream block lacks 'sync_interval: always'")
    variables = [password_variable(t) for t in tenants]
    if len(set(variables)) != len(variables):
        raise ValueError("two tenants map to the same password variable")
    text = _korg_tenant(template, korg_tenant, prefix)
    text = _tenant_erasures(text, tenants, korg_tenant, prefix)
    inboxes = ", ".join([_INBOX_ALLOW] + [f'"{inbox_prefix(t)}.>"' for t in tenants])
    for user in (*RESPONDERS, TRUSTED_PRODUCER):
        if _INBOX_ALLOW not in _user_block(text, user).group(0):
            raise TemplateError(f"user {user!r} has no inbox")
        text = _replace_in_user(text, user, _INBOX_ALLOW, inboxes)
    # The checkpoint service creates and reads each tenant's artifact bucket;
    # the tail reads each tenant's committed blob bucket.
    for user, bucket, keep in (
        ("checkpoint", ARTIFACTS, lambda p: True),
        ("tail", BLOBS, lambda p: "$O." not in p),
    ):
        text = _grant_tenant_buckets(text, user, bucket, tenants, keep)
    # The sequencer writes each tenant's committed blobs (copies of its uploads).
    if _SEQUENCER_API not in _user_block(text, "sequencer").group(0):
        raise TemplateError(f"user 'sequencer' does not publish {_SEQUENCER_API}")
    writes = [f'"$O.{tenant_bucket(BLOBS, t)}.>"' for t in tenants]
    if writes:
        text = _replace_in_user(text, "sequencer", _SEQUENCER_API, ", ".join([_SEQUENCER_API, *writes]))
    if not tenants:
        return text
    ledger = re.search(r"(?ms)^( *)" + LEDGER_ACCOUNT + r" \{\n.*?^\1\}\n", text)
    if ledger is None:
        raise TemplateError(f"the template has no account {LEDGER_ACCOUNT}")
    indent = ledger.group(1)
    exports = [
        f'{indent}    {{ {g.kind}: "{g.subject}", accounts: [{account_name(t)}] }}\n'
        for t in tenants
        for g in tenant_grants(t, prefix)
    ]
    closing = ledger.end() - len(indent) - 2  # the account's closing "}\n"
    accounts = "".join(
        _tenant_account(t, v, (limits or {}).get(t, TenantLimits()), prefix, indent)
        for t, v in zip(tenants, variables, strict=True)
    )
    return (
        text[:closing]
        + f"{indent}  # rendered by laneledger nats-config: what each tenant's account imports\n"
        + f"{indent}  exports = [\n"
        + "".join(exports)
        + f"{indent}  ]\n"
        + text[closing : ledger.end()]
        + accounts
        + text[ledger.end() :]
    )


def _korg_tenant(text: str, korg_tenant: str, prefix: str) -> str:
    """The template's grants for the Korg tenant (``korg``: the ingest's
    appends and commands; its blob buckets, to the ingest, the tail and the
    sequencer) for ``korg_tenant``."""
    k = token(korg_tenant)
    renames = {
        '"ledger.append.korg.>"': f'"{prefix}.append.{k}.>"',
        '"ledger.cmd.korg.*"': f'"{prefix}.cmd.{k}.*"',
        f"{UPLOADS}_korg": tenant_bucket(UPLOADS, korg_tenant),
        f"{BLOBS}_korg": tenant_bucket(BLOBS, korg_tenant),
        '"_INBOX_korg.>"': f'"{inbox_prefix(korg_tenant)}.>"',
    }
    for user in ("ingest", "tail", "sequencer"):
        block = _user_block(text, user)
        renamed = block.group(0)
        for old, new in renames.items():
            renamed = renamed.replace(old, new)
        text = text[: block.start()] + renamed + text[block.end() :]
    if f'"{prefix}.append.{k}.>"' not in _user_block(text, "ingest").group(0):
        raise TemplateError("user 'ingest' does not append in the Korg tenant (ledger.append.korg.>)")
    return text


def _tenant_erasures(text: str, tenants: Sequence[str], korg_tenant: str, prefix: str) -> str:
    """The ingest service sends each tenant's erasures (``POST
    /api/v1/erasures`` with the tenant's token, spec/erasure.md) on that
    tenant's subjects: its ``erase`` command and the ``ensure_actor`` of who
    asks. Nothing else of another tenant than Korg's."""
    korg_commands = f'"{prefix}.cmd.{token(korg_tenant)}.*"'
    if korg_commands not in _user_block(text, "ingest").group(0):
        raise TemplateError(f"user 'ingest' does not command in the Korg tenant ({korg_commands})")
    others = [t for t in tenants if t != korg_tenant]
    grants = [f'"{prefix}.cmd.{token(t)}.{op}"' for t in others for op in INGEST_TENANT_COMMANDS]
    if not grants:
        return text
    return _replace_in_user(text, "ingest", korg_commands, ", ".join([korg_commands, *grants]))


def _grant_tenant_buckets(
    text: str, user: str, bucket: str, tenants: Sequence[str], keep: Callable[[str], bool]
) -> str:
    """``user``'s permissions on the shared ``bucket`` (those ``keep``
    selects), added for each tenant's own bucket."""
    shared = _bucket_permission(bucket).findall(_user_block(text, user).group(0))
    if not shared:
        raise TemplateError(f"user {user!r} has no permission on the bucket {bucket}")
    own = [p.replace(bucket, tenant_bucket(bucket, t), 1) for t in tenants for p in shared if keep(p)]
    if not own:
        return text
    return _replace_in_user(text, user, shared[-1], ", ".join([shared[-1], *own]))


def _tenant_account(tenant: str, variable: str, limits: TenantLimits, prefix: str, indent: str) -> str:
    grants = tenant_grants(tenant, prefix)
    publish = ", ".join(f'"{g.local}"' for g in grants if g.kind == "service")
    subscribe = ", ".join(f'"{g.local}"' for g in grants if g.kind == "stream")
    imports = "".join(
        f'{indent}    {{ {g.kind}: {{ account: {LEDGER_ACCOUNT}, subject: "{g.subject}" }}'
        + (f', to: "{g.local}"' if g.local != g.subject else "")
        + " }\n"
        for g in grants
    )
    i = indent
    return (
        f"{i}# tenant {tenant}: reaches {LEDGER_ACCOUNT} only through these imports\n"
        f"{i}{account_name(tenant)} {{\n"
        f"{i}  users = [\n"
        f"{i}    {{\n"
        f"{i}      user: producer-{tenant}\n"
        f"{i}      password: ${variable}\n"
        f"{i}      permissions: {{\n"
        f"{i}        publish: {{ allow: [{publish}] }}\n"
        f"{i}        subscribe: {{ allow: [{subscribe}] }}\n"
        f"{i}      }}\n"
        f"{i}    }}\n"
        f"{i}  ]\n"
        f"{i}  imports = [\n{imports}{i}  ]\n"
        f"{i}  limits: {{ max_connections: {limits.max_connections}, "
        f"max_subscriptions: {limits.max_subscriptions} }}\n"
        f"{i}}}\n"
    )
