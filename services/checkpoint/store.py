"""The checkpoint service's SQLite store.

Two kinds of data live here, each in its own tables:

* the checkpoints themselves: revisions per key, immutable once written;
* what the service derives from the committed stream to check anchors and
  links: ``lane_events`` (lane, seq → event id), ``lanes`` (their run and the
  last seq seen), ``links`` (which checkpoint each linked event names), and
  the stream position they reflect, all written in one transaction per batch
  so a restart neither skips nor repeats an event.

Checkpoint keys and ids are each tenant's own, like every ledger id
(spec/checkpoint.md, "Tenants"): a checkpoint is identified by (tenant, key,
revision) and (tenant, id), and one saved with no tenant is in a namespace of
its own, stored as tenant ``''`` (``NO_TENANT``; not NULL, which SQLite's
UNIQUE would treat as distinct from every other NULL). ``one_namespace`` is
the one rule for which tenant's key or id a caller that names none means.

Every method is synchronous and runs on the service's one database thread.
SQLite's failures leave as ``InternalError`` (laneledger.sqlite).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from laneledger.contract.clock import ledger_time
from laneledger.contract.errors import EntityNotFound, IdempotencyViolation, InvalidRequest, QuotaExceeded
from laneledger.contract.model import Checkpoint, CheckpointInfo, ProposedCheckpoint, decoder, encode
from laneledger.sdk.checkpoints import RevisionConflict
from laneledger.sqlite import (
    Durability,
    applied_position,
    check_schema_version,
    failures_as,
    fetch_all,
    open_database,
    record_applied_position,
    shred_wal,
    transaction,
)

# 2: tenants (checkpoints.tenant, checkpoints.artifact_sha256, lanes.tenant).
# 3: the stream index keyed by tenant (every id is its tenant's own,
# spec/object-model.md, "Identity"); it is read again from position 1.
# 4: checkpoints and tombstones keyed by (tenant, id) and (tenant, key,
# revision), tenant '' for none (migrated in place, nothing lost).
# 5: checkpoints.data_subject and checkpoints.created_at, what a ledger
# erasure of a data subject or by age selects (spec/checkpoint.md, "Erasure").
SCHEMA_VERSION = 5

NO_TENANT = ""  # the namespace of checkpoints of no tenant: the operator's alone
TENANT_PATH = "$.tenant"  # where a read command names whose key or id it means

# What is derived from the committed stream, keyed by (id, tenant): two
# tenants' lanes or events of one id are two things.
STREAM_INDEX_DDL = """
CREATE TABLE IF NOT EXISTS lanes (
    lane_id    TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    last_seq   INTEGER NOT NULL,
    PRIMARY KEY (lane_id, tenant)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lanes_by_session ON lanes (session_id);
CREATE TABLE IF NOT EXISTS lane_events (
    lane_id  TEXT NOT NULL,
    tenant   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (lane_id, tenant, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS links (
    event_id      TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    lane_id       TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    PRIMARY KEY (event_id, tenant)
);
CREATE INDEX IF NOT EXISTS links_by_checkpoint ON links (checkpoint_id);
"""

DDL = (
    """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
    id             TEXT NOT NULL,
    key            TEXT NOT NULL,
    revision       INTEGER NOT NULL,
    content_digest TEXT NOT NULL,
    session_id     TEXT,
    run_id         TEXT,
    terminal       INTEGER NOT NULL,
    anchor_lane_id TEXT,
    state_bytes    INTEGER NOT NULL,
    body           BLOB NOT NULL,
    tenant          TEXT NOT NULL DEFAULT '',
    artifact_sha256 TEXT,
    data_subject    TEXT,
    created_at      TEXT,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, key, revision)
);
CREATE INDEX IF NOT EXISTS checkpoints_by_run ON checkpoints (session_id, run_id);
CREATE INDEX IF NOT EXISTS checkpoints_by_anchor_lane ON checkpoints (anchor_lane_id);
CREATE TABLE IF NOT EXISTS artifacts (
    sha256      TEXT PRIMARY KEY,
    size_bytes  INTEGER NOT NULL,
    nuid        TEXT NOT NULL,
    verified_at TEXT NOT NULL
);
-- What erase() removed, without state: a revision number is never reused
-- and a read of an erased id says so (spec/checkpoint.md, "Erasure").
-- IF NOT EXISTS, so a schema-2 file gains it on open without a migration.
CREATE TABLE IF NOT EXISTS erased (
    id        TEXT NOT NULL,
    key       TEXT NOT NULL,
    revision  INTEGER NOT NULL,
    digest    TEXT NOT NULL,
    tenant    TEXT NOT NULL DEFAULT '',
    erased_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
"""
    + STREAM_INDEX_DDL
)


_APPLIED = "applied_position"  # the meta key of the last stream position indexed


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Tenants. Checkpoints saved before them belong to no tenant (only the
    operator token reads them); lanes indexed before them keep an unknown
    tenant (the stream is not read again), so a later save anchored there
    derives none and takes the tenant it names."""
    conn.execute("ALTER TABLE checkpoints ADD COLUMN tenant TEXT")
    conn.execute("ALTER TABLE checkpoints ADD COLUMN artifact_sha256 TEXT")
    conn.execute("ALTER TABLE lanes ADD COLUMN tenant TEXT")
    for rowid, body in conn.execute("SELECT rowid, body FROM checkpoints").fetchall():
        artifact = decoder(Checkpoint).decode(body).artifact
        if artifact is not None:
            conn.execute(
                "UPDATE checkpoints SET artifact_sha256 = ? WHERE rowid = ?", (artifact.sha256, rowid)
            )


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """The stream index keyed by tenant: built again from the stream's start
    (it is derived, and the old rows do not say whose each lane was)."""
    for table in ("lanes", "lane_events", "links"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in STREAM_INDEX_DDL.split(";"):  # one by one: executescript would commit
        if statement.strip():
            conn.execute(statement)
    record_applied_position(conn, _APPLIED, 0)


# Version 4's tables, which a version-3 file is copied into (keeping rowids:
# "latest saved" and reconcile order by them).
_V4_CHECKPOINTS = DDL[DDL.index("CREATE TABLE IF NOT EXISTS checkpoints") : DDL.index("CREATE INDEX")]
_V4_ERASED = DDL[
    DDL.index("CREATE TABLE IF NOT EXISTS erased") : DDL.index("CREATE TABLE IF NOT EXISTS lanes")
]


def _migrate_3_to_4(conn: sqlite3.Connection) -> None:
    """Checkpoint keys and ids each tenant's own: the tables are rebuilt
    keyed by (tenant, id), with '' for no tenant; every row is kept."""
    for table, ddl in (("checkpoints", _V4_CHECKPOINTS), ("erased", _V4_ERASED)):
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_v3")
        conn.execute(ddl.strip().rstrip(";"))
        picked = ", ".join("coalesce(tenant, '')" if c == "tenant" else c for c in columns)
        conn.execute(
            f"INSERT INTO {table} (rowid, {', '.join(columns)}) SELECT rowid, {picked} FROM {table}_v3"
        )
        conn.execute(f"DROP TABLE {table}_v3")
    for statement in DDL.split(";"):  # the indexes dropped with the old tables
        if statement.strip().startswith("CREATE INDEX"):
            conn.execute(statement)


def _migrate_4_to_5(conn: sqlite3.Connection) -> None:
    """The columns a ledger erasure of a data subject or by age selects by;
    ``created_at`` filled from each body (no checkpoint before names a data
    subject). A file migrated from version 3 has them already (version 4's
    table is made from this ``DDL``)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(checkpoints)")}
    for column in ("data_subject", "created_at"):
        if column not in columns:
            conn.execute(f"ALTER TABLE checkpoints ADD COLUMN {column} TEXT")
    rows = conn.execute("SELECT rowid, body FROM checkpoints WHERE created_at IS NULL").fetchall()
    conn.executemany(
        "UPDATE checkpoints SET created_at = ? WHERE rowid = ?",
        [(ledger_time(decoder(Checkpoint).decode(body).created_at), rowid) for rowid, body in rows],
    )


def one_namespace(tenants: Sequence[str], path: str = TENANT_PATH, **ident: str) -> str:
    """Whose checkpoint key or id (``ident``) a caller that names no tenant
    means (the operator token, an open service, a trusted user): the only
    namespace that has it (``NO_TENANT`` when none does, so a lookup answers
    "unknown"); when several do, ``invalid_request`` at ``path`` listing
    them ('' for no tenant). The sequencer's rule (laneledger.store.reader
    ``_one_tenant``): the operator sees every tenant, so naming them
    reveals nothing."""
    if len(tenants) > 1:
        raise InvalidRequest(
            "several tenants have checkpoints of what this names: name the tenant",
            path=path,
            kind="checkpoint",
            **ident,
            tenants=sorted(tenants),
        )
    return tenants[0] if tenants else NO_TENANT


def several_tenants(tenants: list[str]) -> InvalidRequest:
    """A save naming no tenant, whose lane or session several tenants have."""
    return InvalidRequest(
        "several tenants have the checkpoint's lane or session: name the tenant",
        path="$.checkpoint.tenant",
        tenants=sorted(tenants),
    )


def tenant_of_namespace(namespace: str) -> str | None:
    return namespace if namespace != NO_TENANT else None


# Which tenants have checkpoints of a key, of an id (or its tombstone: an
# erased id is answered "erased"), anchored in a lane id.
_NAMESPACES = {
    "key": "SELECT DISTINCT tenant FROM checkpoints WHERE key = ?1",
    "id": "SELECT tenant FROM checkpoints WHERE id = ?1 UNION SELECT tenant FROM erased WHERE id = ?1",
    "lane_id": "SELECT DISTINCT tenant FROM checkpoints WHERE anchor_lane_id = ?1",
}


class LaneEvent(msgspec.Struct, frozen=True):
    """What the store keeps of one committed event."""

    position: int
    lane_id: str
    seq: int
    event_id: str
    session_id: str
    run_id: str
    linked_checkpoint_id: str | None = None  # set for lane.framework.checkpoint.linked
    tenant: str = ""


def info_of(checkpoint: Checkpoint, state_bytes: int) -> CheckpointInfo:
    fields = msgspec.structs.asdict(checkpoint)
    del fields["state"]
    return CheckpointInfo(**fields, state_bytes=state_bytes)


class CheckpointStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._db = conn
        # Inline state bytes of the kept revisions, by namespace (``state_used``).
        self._state_used: dict[str, int] = {}
        # An erase left the WAL holding erased state: the next write tries again.
        self._wal_pending = False

    @classmethod
    def open(cls, path: str | Path) -> CheckpointStore:
        """``Durability.FULL``: a save is on disk before its reply leaves."""
        what = "checkpoint database"
        conn = open_database(path, durability=Durability.FULL, ddl=DDL, what=what)
        try:
            check_schema_version(
                conn,
                SCHEMA_VERSION,
                what=what,
                path=path,
                migrations={1: _migrate_1_to_2, 2: _migrate_2_to_3, 3: _migrate_3_to_4, 4: _migrate_4_to_5},
                on_create=lambda db: record_applied_position(db, _APPLIED, 0),
            )
            with failures_as(f"cannot open {what}", path=str(path)):
                # After any migration: version 1 had neither column.
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS checkpoints_by_artifact ON checkpoints (artifact_sha256)"
                )
                # Lookups by key or id alone: which tenants have it (one_namespace).
                conn.execute("CREATE INDEX IF NOT EXISTS checkpoints_by_key ON checkpoints (key)")
                conn.execute("CREATE INDEX IF NOT EXISTS checkpoints_by_id ON checkpoints (id)")
                conn.execute("CREATE INDEX IF NOT EXISTS erased_by_key ON erased (tenant, key)")
                conn.execute("CREATE INDEX IF NOT EXISTS erased_by_id ON erased (id)")
        except BaseException:
            conn.close()
            raise
        return cls(conn)

    def close(self) -> None:
        self._db.close()

    # -- plumbing ----------------------------------------------------------------

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        return fetch_all(self._db, sql, params, what="checkpoint store read failed")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any error. After it, a WAL
        an erase could not empty (a reader held an older snapshot) is tried
        again (``shred_wal``)."""
        with transaction(self._db, "checkpoint store write failed") as db:
            yield db
        if self._wal_pending:
            with failures_as("checkpoint store write failed"):
                self._wal_pending = not shred_wal(self._db)

    # -- the committed stream ------------------------------------------------------

    def applied_position(self) -> int:
        return applied_position(self._db, _APPLIED, what="checkpoint store read failed")

    def reset_index(self) -> None:
        """Forget what was derived from the committed stream (lanes, their
        events, checkpoint links, the applied position), keeping the
        checkpoints themselves: the index is read again from position 1."""
        with self._tx() as db:
            for table in ("lanes", "lane_events", "links"):
                db.execute(f"DELETE FROM {table}")
            record_applied_position(db, _APPLIED, 0)

    def apply_events(self, last_position: int, events: list[LaneEvent]) -> None:
        """Record a batch of committed events and the position they reach, in
        one transaction (``last_position`` also covers bodies that were skipped)."""
        with self._tx() as db:
            db.executemany(
                "INSERT INTO lane_events (lane_id, tenant, seq, event_id) VALUES (?, ?, ?, ?)",
                [(e.lane_id, e.tenant, e.seq, e.event_id) for e in events],
            )
            db.executemany(
                "INSERT INTO lanes (lane_id, tenant, session_id, run_id, last_seq) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (lane_id, tenant) DO UPDATE SET last_seq = max(last_seq, excluded.last_seq)",
                [(e.lane_id, e.tenant, e.session_id, e.run_id, e.seq) for e in events],
            )
            db.executemany(
                "INSERT INTO links (event_id, tenant, checkpoint_id, lane_id, seq, position)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (e.event_id, e.tenant, e.linked_checkpoint_id, e.lane_id, e.seq, e.position)
                    for e in events
                    if e.linked_checkpoint_id is not None
                ],
            )
            record_applied_position(db, _APPLIED, last_position)

    def events_at(self, lane_id: str, seq: int, tenant: str | None = None) -> list[tuple[str, str]]:
        """``(tenant, event id)`` of the event at ``seq`` of lane ``lane_id``:
        of that tenant's lane, or (no tenant) of every tenant's lane of the id."""
        if tenant is None:
            return self._rows(
                "SELECT tenant, event_id FROM lane_events WHERE lane_id = ? AND seq = ?", (lane_id, seq)
            )
        return self._rows(
            "SELECT tenant, event_id FROM lane_events WHERE lane_id = ? AND tenant = ? AND seq = ?",
            (lane_id, tenant, seq),
        )

    def lane(self, tenant: str | None, lane_id: str) -> tuple[str, str, int] | None:
        """``(session_id, run_id, last_seq)`` of the tenant's lane, as seen on
        the stream; with no tenant, of the only tenant's lane of this id (None
        when several tenants have one)."""
        rows = self._rows(
            "SELECT session_id, run_id, last_seq FROM lanes WHERE lane_id = ? AND (? IS NULL OR tenant = ?)"
            " LIMIT 2",
            (lane_id, tenant, tenant),
        )
        return rows[0] if len(rows) == 1 else None

    def tenant_of(self, proposal: ProposedCheckpoint) -> str | None:
        """The tenant of a save that names none, by what it names: its
        anchor's lane, else its session's lanes, as seen on the committed
        stream. Ids are each tenant's own: when several tenants have that lane
        (or session), ``invalid_request`` naming ``$.checkpoint.tenant``."""
        if proposal.anchor is not None:
            where, value = "lane_id = ?", proposal.anchor.lane_id
        elif proposal.session_id is not None:
            where, value = "session_id = ?", proposal.session_id
        else:
            return None
        tenants = [t for (t,) in self._rows(f"SELECT DISTINCT tenant FROM lanes WHERE {where}", (value,))]
        if len(tenants) > 1:
            raise several_tenants(tenants)
        return tenants[0] if tenants else None

    def namespaces(self, what: str, value: str) -> list[str]:
        """The tenants ('' for none) that have a checkpoint of ``what``
        (``_NAMESPACES``) ``value``."""
        return [tenant for (tenant,) in self._rows(_NAMESPACES[what], (value,))]

    def key_namespace(self, key: str) -> str:
        """The namespace of a save that names no tenant and derives none:
        its key's, when only one tenant (or none) has that key."""
        return one_namespace(self.namespaces("key", key), path="$.checkpoint.tenant", key=key)

    def artifact_of_tenant(self, sha256: str, tenant: str) -> bool:
        """Whether a checkpoint of ``tenant`` references this artifact."""
        return bool(
            self._rows(
                "SELECT 1 FROM checkpoints WHERE artifact_sha256 = ? AND tenant = ? LIMIT 1", (sha256, tenant)
            )
        )

    def artifact_tenants(self, sha256: str) -> list[str]:
        """The tenants whose checkpoints reference this artifact."""
        return [
            tenant
            for (tenant,) in self._rows(
                "SELECT DISTINCT tenant FROM checkpoints WHERE artifact_sha256 = ? AND tenant != ''"
                " ORDER BY tenant",
                (sha256,),
            )
        ]

    # -- checkpoints: reads ------------------------------------------------------------

    def _one(self, where: str, params: tuple[Any, ...]) -> Checkpoint | None:
        rows = self._rows(f"SELECT body FROM checkpoints WHERE {where}", params)
        return decoder(Checkpoint).decode(rows[0][0]) if rows else None

    def get(self, checkpoint_id: str, tenant: str) -> Checkpoint:
        """``tenant``'s checkpoint of this id ('' for no tenant's)."""
        found = self._one("tenant = ? AND id = ?", (tenant, checkpoint_id))
        if found is None:
            erased = self._rows(
                "SELECT erased_at FROM erased WHERE tenant = ? AND id = ?", (tenant, checkpoint_id)
            )
            if erased:
                raise EntityNotFound(
                    "this checkpoint was erased",
                    kind="checkpoint",
                    id=checkpoint_id,
                    reason="erased",
                    erased_at=erased[0][0],
                )
            raise EntityNotFound("no such checkpoint", kind="checkpoint", id=checkpoint_id)
        return found

    def latest(self, key: str, tenant: str) -> Checkpoint | None:
        return self._one("tenant = ? AND key = ? ORDER BY revision DESC LIMIT 1", (tenant, key))

    def latest_anchored_in(self, lane_id: str, tenant: str) -> Checkpoint | None:
        """``tenant``'s most recently saved checkpoint anchored in its lane
        ``lane_id``, any key."""
        return self._one("tenant = ? AND anchor_lane_id = ? ORDER BY rowid DESC LIMIT 1", (tenant, lane_id))

    def _infos(self, where: str, params: tuple[Any, ...]) -> list[CheckpointInfo]:
        rows = self._rows(f"SELECT body, state_bytes FROM checkpoints WHERE {where}", params)
        return [info_of(decoder(Checkpoint).decode(body), size) for body, size in rows]

    def revisions(
        self, key: str, after_revision: int, limit: int, tenant: str
    ) -> tuple[list[CheckpointInfo], bool]:
        infos = self._infos(
            "tenant = ? AND key = ? AND revision > ? ORDER BY revision LIMIT ?",
            (tenant, key, after_revision, limit + 1),
        )
        return infos[:limit], len(infos) > limit

    def infos(self, checkpoint_ids: list[str], tenant: str) -> dict[str, CheckpointInfo]:
        if not checkpoint_ids:
            return {}
        marks = ",".join("?" * len(checkpoint_ids))
        infos = self._infos(f"tenant = ? AND id IN ({marks})", (tenant, *checkpoint_ids))
        return {info.id: info for info in infos}

    def unlinked(
        self,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        key: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> tuple[list[CheckpointInfo], bool]:
        """Terminal revisions no consumed linked event names, in save order;
        ``tenant``: that namespace's only (None: every one's). An event links
        its own tenant's checkpoint of the id; one of no tenant, any tenant's
        event naming it (whose run it ended was never known)."""
        where = [
            "terminal = 1",
            "NOT EXISTS (SELECT 1 FROM links l WHERE l.checkpoint_id = checkpoints.id"
            " AND (l.tenant = checkpoints.tenant OR checkpoints.tenant = ''))",
        ]
        params: list[str] = []
        for column, value in (
            ("session_id", session_id),
            ("run_id", run_id),
            ("key", key),
            ("tenant", tenant),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        infos = self._infos(" AND ".join(where) + " ORDER BY rowid LIMIT ?", (*params, limit + 1))
        return infos[:limit], len(infos) > limit

    # -- checkpoints: the save -----------------------------------------------------------

    def precheck(
        self, proposal: ProposedCheckpoint, content: str, expected_revision: int, tenant: str
    ) -> Checkpoint | None:
        """The stored checkpoint when this save is a replay; raises when it is
        an idempotency violation or a revision conflict; None when it may go
        on. Judged in ``tenant``'s namespace alone: another tenant's key or id
        is not looked at."""
        stored = self._by_id(proposal.id, tenant)
        if stored is not None:
            stored_content, body = stored
            if stored_content != content:
                raise IdempotencyViolation(
                    "this checkpoint id was saved with other content",
                    id=proposal.id,
                    stored_digest=stored_content,
                    digest=content,
                )
            replay: Checkpoint = decoder(Checkpoint).decode(body)
            return replay
        actual = self._latest_revision(proposal.key, tenant)
        if actual != expected_revision:
            raise RevisionConflict(
                f"checkpoint key is at revision {actual}, the save expected {expected_revision}",
                kind="checkpoint",
                key=proposal.key,
                fields=["revision"],
                expected_revision=expected_revision,
                actual_revision=actual,
                reason=RevisionConflict.reason,
            )
        return None

    def save(
        self,
        proposal: ProposedCheckpoint,
        *,
        content: str,
        digest: str,
        state_bytes: int,
        expected_revision: int,
        created_at: str,
        tenant: str | None = None,
        state_limit: Callable[[str], int | None] = lambda namespace: None,
    ) -> tuple[Checkpoint, bool]:
        """Check again (another save may have won while this one waited for its
        anchor) and write revision ``expected_revision + 1`` in ``tenant``'s
        namespace; a save that names and derives none takes its key's
        (``key_namespace``). Returns the checkpoint and whether it was a replay.
        ``state_limit``: a namespace's ``checkpoint_state_bytes`` (None: no
        limit), which a new revision's ``state_bytes`` may not take it past."""
        with self._tx() as db:
            namespace = self.key_namespace(proposal.key) if tenant is None else tenant
            replay = self.precheck(proposal, content, expected_revision, namespace)
            if replay is not None:
                return replay, True
            used, limit = self.state_used(namespace), state_limit(namespace)
            if limit is not None and used + state_bytes > limit:
                raise QuotaExceeded(
                    f"the tenant's kept checkpoints would hold {used + state_bytes} bytes of inline "
                    f"state, more than its checkpoint_state_bytes limit of {limit}: erase old "
                    "revisions, or save the state as an artifact",
                    limit="checkpoint_state_bytes",
                    tenant=namespace,
                    used_bytes=used,
                    request_bytes=state_bytes,
                    limit_bytes=limit,
                )
            tenant = tenant_of_namespace(namespace)
            checkpoint = Checkpoint(
                id=proposal.id,
                key=proposal.key,
                revision=expected_revision + 1,
                format=proposal.format,
                digest=digest,
                session_id=proposal.session_id,
                run_id=proposal.run_id,
                tenant=tenant,
                data_subject=proposal.data_subject,
                state=proposal.state,
                artifact=proposal.artifact,
                anchor=proposal.anchor,
                terminal=proposal.terminal,
                created_at=created_at,
            )
            db.execute(
                "INSERT INTO checkpoints (id, key, revision, content_digest, session_id, run_id,"
                " terminal, anchor_lane_id, state_bytes, body, tenant, artifact_sha256, data_subject,"
                " created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    checkpoint.id,
                    checkpoint.key,
                    checkpoint.revision,
                    content,
                    checkpoint.session_id,
                    checkpoint.run_id,
                    int(checkpoint.terminal),
                    checkpoint.anchor.lane_id if checkpoint.anchor else None,
                    state_bytes,
                    encode(checkpoint),
                    namespace,
                    checkpoint.artifact.sha256 if checkpoint.artifact else None,
                    checkpoint.data_subject,
                    ledger_time(checkpoint.created_at),  # compares as text with a created_before
                ),
            )
        self._state_used[namespace] = used + state_bytes  # committed
        return checkpoint, False

    def state_used(self, namespace: str) -> int:
        """Inline state bytes the namespace's kept revisions hold: summed from
        the file once (a restart counts what it keeps), then kept by ``save``
        and ``erase``."""
        if namespace not in self._state_used:
            rows = self._rows(
                "SELECT COALESCE(SUM(state_bytes), 0) FROM checkpoints WHERE tenant = ?", (namespace,)
            )
            self._state_used[namespace] = int(rows[0][0])
        return self._state_used[namespace]

    def _by_id(self, checkpoint_id: str, tenant: str) -> tuple[str, bytes] | None:
        rows = self._rows(
            "SELECT content_digest, body FROM checkpoints WHERE tenant = ? AND id = ?",
            (tenant, checkpoint_id),
        )
        return rows[0] if rows else None

    def _latest_revision(self, key: str, tenant: str) -> int:
        # Erased revisions count: the next save never reuses their number.
        rows = self._rows(
            "SELECT max(coalesce((SELECT max(revision) FROM checkpoints WHERE tenant = ? AND key = ?), 0),"
            " coalesce((SELECT max(revision) FROM erased WHERE tenant = ? AND key = ?), 0))",
            (tenant, key, tenant, key),
        )
        latest: int = rows[0][0]
        return latest

    # -- artifacts already verified ------------------------------------------------------

    def artifact_verified(self, sha256: str, nuid: str) -> bool:
        return bool(self._rows("SELECT 1 FROM artifacts WHERE sha256 = ? AND nuid = ?", (sha256, nuid)))

    def mark_artifact(self, sha256: str, size_bytes: int, nuid: str, verified_at: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO artifacts (sha256, size_bytes, nuid, verified_at) VALUES (?,?,?,?)"
                " ON CONFLICT (sha256) DO UPDATE SET size_bytes = excluded.size_bytes,"
                " nuid = excluded.nuid, verified_at = excluded.verified_at",
                (sha256, size_bytes, nuid, verified_at),
            )

    # -- erasure ---------------------------------------------------------------------------

    def erasure_plan(
        self,
        keys: list[str],
        checkpoint_ids: list[str],
        tenant: str | None = None,
        *,
        run_ids: Sequence[str] = (),
        key_prefix: str | None = None,
        key_prefixes: Sequence[str] = (),
        data_subject: str | None = None,
        created_before: str | None = None,
        limit: int = 500,
        after: tuple[str, int] | None = None,
        bucket_tenant: str | None = None,
    ) -> tuple[list[CheckpointInfo], list[str], bool]:
        """What erasing every revision of ``keys``, each of ``checkpoint_ids``,
        every revision of ``run_ids`` (under ``key_prefix``), of every key
        under one of ``key_prefixes``, naming ``data_subject`` and created
        before ``created_before`` (the ledger's form, ``ledger_time``)
        removes, in ``tenant``'s namespace
        (None: the only one those select, ``one_namespace``): the first
        ``limit`` of those revisions by (key, revision) after ``after``, the
        artifacts that no other revision references, and whether more follow.
        ``bucket_tenant``: whose bucket the artifacts are in (None: the
        shared one, which any tenant's revision may use)."""
        run_ids, prefixes = list(run_ids), list(key_prefixes)
        if not (keys or checkpoint_ids or run_ids or prefixes or data_subject or created_before):
            return [], [], False
        key_marks = ",".join("?" * len(keys)) or "NULL"
        id_marks = ",".join("?" * len(checkpoint_ids)) or "NULL"
        run_marks = ",".join("?" * len(run_ids)) or "NULL"
        prefix = key_prefix or ""
        selected = (
            f"(key IN ({key_marks}) OR id IN ({id_marks})"
            f" OR (run_id IN ({run_marks}) AND substr(key, 1, ?) = ?)"
            + "".join(" OR substr(key, 1, ?) = ?" for _ in prefixes)
            + " OR data_subject = ? OR created_at < ?)"  # NULL, when not asked: selects nothing
        )
        selected_params = (
            *keys,
            *checkpoint_ids,
            *run_ids,
            len(prefix),
            prefix,
            *(part for p in prefixes for part in (len(p), p)),
            data_subject,
            created_before,
        )
        if tenant is None:
            found = [
                t
                for (t,) in self._rows(
                    f"SELECT DISTINCT tenant FROM checkpoints WHERE {selected}", selected_params
                )
            ]
            tenant = one_namespace(found)
        after_key, after_revision = after or ("", 0)
        rows = self._rows(
            f"SELECT body, state_bytes FROM checkpoints WHERE {selected}"
            " AND tenant = ? AND (key, revision) > (?, ?) ORDER BY key, revision LIMIT ?",
            (*selected_params, tenant, after_key, after_revision, limit + 1),
        )
        more = len(rows) > limit
        infos = [info_of(decoder(Checkpoint).decode(body), size) for body, size in rows[:limit]]
        ids = {info.id for info in infos}
        orphans: list[str] = []
        for sha in sorted({info.artifact.sha256 for info in infos if info.artifact is not None}):
            # A tenant's blob is in its own bucket: only its revisions can keep
            # it (the shared bucket's: any namespace's revision, to be safe).
            users = self._rows(
                "SELECT tenant, id FROM checkpoints WHERE artifact_sha256 = ? AND (? IS NULL OR tenant = ?)",
                (sha, bucket_tenant, bucket_tenant),
            )
            if all(owner == tenant and user in ids for owner, user in users):
                orphans.append(sha)
        return infos, orphans, more

    def revisions_in_session(self, tenant: str, session_id: str, run_id: str | None, limit: int) -> list[str]:
        """Ids of the revisions in ``tenant``'s namespace saved for this
        session (this run of it): what an erasure of that scope in the
        ledger erases here (spec/erasure.md, *Readers*)."""
        sql = "SELECT id FROM checkpoints WHERE tenant = ? AND session_id = ?"
        params: tuple[Any, ...] = (tenant, session_id)
        if run_id is not None:
            sql, params = sql + " AND run_id = ?", (*params, run_id)
        return [row[0] for row in self._rows(sql + " ORDER BY key, revision LIMIT ?", (*params, limit))]

    def erase(self, checkpoint_ids: list[str], erased_at: str, tenant: str) -> None:
        """Delete these revisions of ``tenant``'s, keeping a tombstone without
        state for each. ``secure_delete`` zeroes the freed pages and the WAL
        is checkpointed and truncated, so the bytes leave the files, not just
        the tables."""
        with failures_as("checkpoint store write failed"):
            self._db.execute("PRAGMA secure_delete = ON")
        self._state_used.pop(tenant, None)  # summed again on next use
        with self._tx() as db:
            for checkpoint_id in checkpoint_ids:
                row = db.execute(
                    "SELECT key, revision, body FROM checkpoints WHERE tenant = ? AND id = ?",
                    (tenant, checkpoint_id),
                ).fetchone()
                if row is None:
                    continue
                key, revision, _ = row
                db.execute("DELETE FROM checkpoints WHERE tenant = ? AND id = ?", (tenant, checkpoint_id))
                # No digest in the tombstone: a hash of the state, unkeyed, would
                # confirm a guess of it (spec/erasure.md). Older ones lose theirs.
                db.execute(
                    "INSERT OR REPLACE INTO erased (id, key, revision, digest, tenant, erased_at)"
                    " VALUES (?,?,?,'',?,?)",
                    (checkpoint_id, key, revision, tenant, erased_at),
                )
            db.execute("UPDATE erased SET digest = '' WHERE digest != ''")
        with failures_as("checkpoint store write failed"):
            self._wal_pending = not shred_wal(self._db)

    def forget_artifacts(self, shas: list[str]) -> None:
        """Erased blobs are no longer verified: a blob stored again is hashed again."""
        with self._tx() as db:
            db.executemany("DELETE FROM artifacts WHERE sha256 = ?", [(sha,) for sha in shas])
