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
* it subscribes to ``_INBOX_<tenant>.>`` only, the inbox prefix its client
  must use (``LedgerClient.connect(inbox_prefix=inbox_prefix(tenant))``), so
  it cannot read another tenant's receipts and replies, which travel on the
  other tenant's inboxes;
* the services that answer producers (sequencer: receipts and command
  replies; checkpoint service: replies) may publish on those inboxes.

The shared ``producer`` user stays, for a trusted harness that writes for
several tenants. ``--korg-tenant`` renders the tail's one append subject
(its Korg endpoint's tenant, ``korg`` in the template).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .subjects import inbox_prefix, token

_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INBOX_ALLOW = '"_INBOX.>"'
RESPONDERS = ("sequencer", "checkpoint")  # they publish on producers' inboxes


class TemplateError(ValueError):
    """The template lacks a part the renderer needs (a user, a subject)."""


def _user_block(text: str, user: str) -> re.Match:
    found = re.search(r"(?ms)^    \{\n      user: " + re.escape(user) + r"\n.*?^    \}\n", text)
    if found is None:
        raise TemplateError(f"the template has no user {user!r}")
    return found


def password_variable(tenant: str) -> str:
    return f"LANELEDGER_PRODUCER_{tenant.upper().replace('-', '_')}_PASSWORD"


def render(template: str, tenants: Sequence[str] = (), *, korg_tenant: str = "korg",
           prefix: str = "ledger") -> str:
    """The template with a producer user per tenant (see the module text)."""
    for tenant in (*tenants, korg_tenant):
        if not _TENANT.match(tenant):
            raise ValueError(f"tenant {tenant!r}: letters, digits, '_' and '-', at most 64")
    variables = [password_variable(t) for t in tenants]
    if len(set(variables)) != len(variables):
        raise ValueError("two tenants map to the same password variable")
    append_all = f'"{prefix}.append.>"'
    text = template
    tail = _user_block(text, "tail")
    korg = f'"{prefix}.append.{token(korg_tenant)}.>"'
    tail_text = re.sub(rf'"{re.escape(prefix)}\.append\.[^"]*"', korg, tail.group(0), count=1)
    text = text[:tail.start()] + tail_text + text[tail.end():]
    for user in RESPONDERS:
        block = _user_block(text, user)
        if _INBOX_ALLOW not in block.group(0):
            raise TemplateError(f"user {user!r} publishes on no inbox")
        inboxes = ", ".join([_INBOX_ALLOW] + [f'"{inbox_prefix(t)}.>"' for t in tenants])
        text = text[:block.start()] + block.group(0).replace(_INBOX_ALLOW, inboxes, 1) + \
            text[block.end():]
    producer = _user_block(text, "producer").group(0)
    if append_all not in producer or f"subscribe: {{ allow: [{_INBOX_ALLOW}] }}" not in producer:
        raise TemplateError("the producer user must publish "
                            f"{append_all} and subscribe to {_INBOX_ALLOW} only")
    added = []
    for tenant, variable in zip(tenants, variables):
        block = (producer
                 .replace("      user: producer\n", f"      user: producer-{tenant}\n", 1)
                 .replace("$LANELEDGER_PRODUCER_PASSWORD", f"${variable}", 1)
                 .replace(append_all, f'"{prefix}.append.{token(tenant)}.>"', 1)
                 .replace(f"subscribe: {{ allow: [{_INBOX_ALLOW}] }}",
                          f'subscribe: {{ allow: ["{inbox_prefix(tenant)}.>"] }}', 1))
        added.append(block)
    end = _user_block(text, "producer").end()
    return text[:end] + "".join(added) + text[end:]
