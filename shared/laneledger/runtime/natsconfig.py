"""Per-tenant NATS users: ``deploy/nats.conf`` rendered for a list of tenants.

nats-server's plain-config users have fixed permissions (the ``{{tag()}}``
permission templates exist only for JWT users issued with nsc), so per-tenant
permissions are rendered: the shipped ``deploy/nats.conf`` is the template,
and ``laneledger nats-config --tenant acme --tenant globex`` prints it with,
for each tenant, a user ``producer-<tenant>`` (password
``$LANELEDGER_PRODUCER_<TENANT>_PASSWORD``) that has the shared producer's
permissions narrowed to that tenant:

* it publishes append requests on ``<prefix>.append.<tenant>.>`` only, so it
  cannot append as another tenant (the sequencer also refuses a lane or
  actor of another tenant, ``tenant_mismatch``);
* it sends commands on ``<prefix>.cmd.<tenant>.*`` and checkpoint requests
  on ``<prefix>.checkpoint.<tenant>.*`` only, which the sequencer and the
  checkpoint service answer for that tenant alone (another tenant's lane,
  session, run, receipt or checkpoint is "not found");
* its checkpoint artifacts live in its own bucket,
  ``LEDGER_CHECKPOINT_ARTIFACTS_<tenant>`` (``subjects.tenant_bucket``), the
  only one it may touch; the checkpoint service may create and read it;
* it uploads content-reference blobs into ``LEDGER_UPLOADS_<tenant>`` (put,
  get and purge, which nats-py uses to clear a failed put) and reads committed ones in
  ``LEDGER_BLOBS_<tenant>``, which it may not write: the sequencer copies an
  upload there before an append referencing it commits (so no producer can
  delete or overwrite a committed blob) and is granted
  ``$O.LEDGER_BLOBS_<tenant>.>`` for it; it creates both buckets (it may
  manage every stream, and reads the uploads through ``$JS.API``). The tail
  may read ``LEDGER_BLOBS_<tenant>``; no other blob bucket is the tenant's;
* it subscribes to ``_INBOX_<tenant>.>`` only, the inbox prefix its client
  must use (``LedgerClient.connect(inbox_prefix=inbox_prefix(tenant))``), so
  it cannot read another tenant's receipts and replies, which travel on the
  other tenant's inboxes;
* the services' reply users (``sequencer-replies``: receipts and command
  replies; ``checkpoint-replies``: checkpoint replies) may publish on those
  inboxes, and on nothing but inboxes.

The shared ``producer`` user stays, for a trusted harness that writes for
several tenants. ``--korg-tenant`` renders the tail's one append subject
(its Korg endpoint's tenant, ``korg`` in the template).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from laneledger.contract.subjects import inbox_prefix, tenant_bucket, token

_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INBOX_ALLOW = '"_INBOX.>"'
# The users receipts and replies leave on (the services' --reply-nats): the
# only ones that publish on producers' inboxes.
RESPONDERS = ("sequencer-replies", "checkpoint-replies")
ARTIFACTS = "LEDGER_CHECKPOINT_ARTIFACTS"  # the shared bucket; a tenant's is ARTIFACTS_<tenant>
BLOBS = "LEDGER_BLOBS"  # likewise for committed content-reference blobs
UPLOADS = "LEDGER_UPLOADS"  # a tenant's uploads bucket is UPLOADS_<tenant>; there is no shared one
_SEQUENCER_API = '"$JS.API.>"'


def _bucket_permission(bucket: str) -> re.Pattern[str]:
    """A permission on a shared bucket: its stream OBJ_<bucket> or its $O.<bucket> subjects."""
    return re.compile(r'"[^"]*(?:OBJ_|\$O\.)' + bucket + r'(?:\.[^"]*)?"')


_ARTIFACT_PERMISSION = _bucket_permission(ARTIFACTS)
_BLOB_PERMISSION = _bucket_permission(BLOBS)


class TemplateError(ValueError):
    """The template lacks a part the renderer needs (a user, a subject)."""


def _user_block(text: str, user: str) -> re.Match[str]:
    found = re.search(r"(?ms)^    \{\n      user: " + re.escape(user) + r"\n.*?^    \}\n", text)
    if found is None:
        raise TemplateError(f"the template has no user {user!r}")
    return found


def password_variable(tenant: str) -> str:
    return f"LANELEDGER_PRODUCER_{tenant.upper().replace('-', '_')}_PASSWORD"


def render(
    template: str, tenants: Sequence[str] = (), *, korg_tenant: str = "korg", prefix: str = "ledger"
) -> str:
    """The template with a producer user per tenant (see the module text)."""
    for tenant in (*tenants, korg_tenant):
        if not _TENANT.match(tenant):
            raise ValueError(f"tenant {tenant!r}: letters, digits, '_' and '-', at most 64")
    variables = [password_variable(t) for t in tenants]
    if len(set(variables)) != len(variables):
        raise ValueError("two tenants map to the same password variable")
    append_all = f'"{prefix}.append.>"'
    # The shared producer's requests for any tenant; producer-T's for T only.
    requests_all = [f'"{prefix}.{kind}.>"' for kind in ("cmd", "checkpoint")]
    text = template
    tail = _user_block(text, "tail")
    korg = f'"{prefix}.append.{token(korg_tenant)}.>"'
    tail_text = re.sub(rf'"{re.escape(prefix)}\.append\.[^"]*"', korg, tail.group(0), count=1)
    text = text[: tail.start()] + tail_text + text[tail.end() :]
    for user in RESPONDERS:
        block = _user_block(text, user)
        if _INBOX_ALLOW not in block.group(0):
            raise TemplateError(f"user {user!r} publishes on no inbox")
        inboxes = ", ".join([_INBOX_ALLOW] + [f'"{inbox_prefix(t)}.>"' for t in tenants])
        text = text[: block.start()] + block.group(0).replace(_INBOX_ALLOW, inboxes, 1) + text[block.end() :]
    # The checkpoint service creates and reads each tenant's artifact bucket.
    block = _user_block(text, "checkpoint")
    shared = _ARTIFACT_PERMISSION.findall(block.group(0))
    if not shared:
        raise TemplateError(f"user 'checkpoint' has no permission on the bucket {ARTIFACTS}")
    own = [_rename_bucket(perm, t) for t in tenants for perm in shared]
    if own:
        text = (
            text[: block.start()]
            + block.group(0).replace(shared[-1], ", ".join([shared[-1], *own]), 1)
            + text[block.end() :]
        )
    # The tail reads each tenant's blob bucket (it stores only in the shared one).
    block = _user_block(text, "tail")
    shared = _BLOB_PERMISSION.findall(block.group(0))
    if not shared:
        raise TemplateError(f"user 'tail' has no permission on the bucket {BLOBS}")
    own = [_rename_bucket(perm, t, BLOBS) for t in tenants for perm in shared if "$O." not in perm]
    if own:
        text = (
            text[: block.start()]
            + block.group(0).replace(shared[-1], ", ".join([shared[-1], *own]), 1)
            + text[block.end() :]
        )
    # The sequencer writes each tenant's committed blobs (copies of its uploads).
    block = _user_block(text, "sequencer")
    if _SEQUENCER_API not in block.group(0):
        raise TemplateError(f"user 'sequencer' does not publish {_SEQUENCER_API}")
    writes = [f'"$O.{tenant_bucket(BLOBS, t)}.>"' for t in tenants]
    if writes:
        grant = ", ".join([_SEQUENCER_API, *writes])
        text = text[: block.start()] + block.group(0).replace(_SEQUENCER_API, grant, 1) + text[block.end() :]
    producer = _user_block(text, "producer").group(0)
    if (
        any(subject not in producer for subject in (append_all, *requests_all))
        or f"subscribe: {{ allow: [{_INBOX_ALLOW}] }}" not in producer
    ):
        raise TemplateError(
            "the producer user must publish "
            f"{', '.join([append_all, *requests_all])} and subscribe to "
            f"{_INBOX_ALLOW} only"
        )
    added = []
    for tenant, variable in zip(tenants, variables, strict=True):
        own_user = (
            producer.replace("      user: producer\n", f"      user: producer-{tenant}\n", 1)
            .replace("$LANELEDGER_PRODUCER_PASSWORD", f"${variable}", 1)
            .replace(append_all, f'"{prefix}.append.{token(tenant)}.>"', 1)
            .replace(requests_all[0], f'"{prefix}.cmd.{token(tenant)}.*"', 1)
            .replace(requests_all[1], f'"{prefix}.checkpoint.{token(tenant)}.*"', 1)
            .replace(
                f"subscribe: {{ allow: [{_INBOX_ALLOW}] }}",
                f'subscribe: {{ allow: ["{inbox_prefix(tenant)}.>"] }}',
                1,
            )
        )
        own_user = _ARTIFACT_PERMISSION.sub(_renamer(tenant, ARTIFACTS), own_user)
        own_user = _BLOB_PERMISSION.sub(_blob_permissions(tenant), own_user)
        added.append(own_user)
    end = _user_block(text, "producer").end()
    return text[:end] + "".join(added) + text[end:]


def _rename_bucket(permission: str, tenant: str, bucket: str = ARTIFACTS) -> str:
    """A permission on a shared bucket, on the tenant's own instead."""
    return permission.replace(bucket, tenant_bucket(bucket, tenant), 1)


def _renamer(tenant: str, bucket: str) -> Callable[[re.Match[str]], str]:
    """``_rename_bucket`` as a ``re.sub`` replacement."""
    return lambda permission: _rename_bucket(permission.group(0), tenant, bucket)


def _blob_permissions(tenant: str) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement for the shared producer's permissions on the
    shared blob bucket: the same on the tenant's uploads bucket, and the
    reading ones (not ``$O.``: no put, so no delete) on its committed bucket."""

    uploads = tenant_bucket(UPLOADS, tenant)

    def replace(found: re.Match[str]) -> str:
        permission = found.group(0)
        own = [permission.replace(BLOBS, uploads, 1)]
        if "STREAM.INFO." in permission:
            # Purging its own uploads: nats-py clears the chunks of a put that
            # failed (a full bucket), which would otherwise count against the
            # tenant's blob_bytes until they age out. Committed blobs are elsewhere.
            own.append(f'"$JS.API.STREAM.PURGE.OBJ_{uploads}"')
        if "$O." not in permission:
            own.append(_rename_bucket(permission, tenant, BLOBS))
        return ", ".join(own)

    return replace
