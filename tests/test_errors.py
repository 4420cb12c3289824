"""The error tree: unique stable codes, a lossless wire round trip, unknown
codes kept, the checkpoint refusals picked by reason, and spec/errors.md
listing exactly the codes that exist and the HTTP status of each."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import msgspec
import pytest

from laneledger.contract import errors as e
from laneledger.contract.errors import ERRORS_BY_CODE, ERRORS_BY_REASON, LedgerError, error_from_wire
from laneledger.contract.model import AppendRejected, ErrorBody, Receipt, Reply, ReplyError
from laneledger.runtime.apidoc import SCHEMA_REF, error_schemas, require_what_is_sent
from laneledger.runtime.httpjson import error_response

ROOT = Path(__file__).resolve().parent.parent
ERRORS_MD = (ROOT / "spec" / "errors.md").read_text()

# Every exception class errors.py defines (not subclasses other modules add,
# such as natsserver's NatsServerError, which shares its parent's code).
DEFINED = sorted(
    (
        cls
        for _, cls in inspect.getmembers(e, inspect.isclass)
        if issubclass(cls, LedgerError) and cls.__module__ == e.__name__
    ),
    key=lambda cls: cls.__name__,
)
# The classes of the wire codes, and the checkpoint refusals that share
# their parent's code (told apart by details["reason"]).
CLASSES = [cls for cls in DEFINED if "reason" not in vars(cls)]
BY_REASON = [cls for cls in DEFINED if "reason" in vars(cls)]

# quota_exceeded: the same request succeeds once the tenant's backlog drains.
RETRYABLE = {"transport_error", "timeout", "unavailable", "internal", "quota_exceeded"}


def test_the_tree_has_the_classes_the_contract_names() -> None:
    assert len(CLASSES) == 28
    assert set(CLASSES) == set(ERRORS_BY_CODE.values())
    assert {cls.__name__ for cls in BY_REASON} == {
        "RevisionConflict",
        "AnchorNotCommitted",
        "AnchorMismatch",
        "ArtifactMissing",
        "ArtifactMismatch",
        "ProofInvalid",  # the transparency log's failed checks (spec/tlog.md)
        "NoteUnverified",
        "NoteSignatureInvalid",
    }
    assert set(BY_REASON) == set(ERRORS_BY_REASON.values())


def test_every_class_has_its_own_code() -> None:
    codes = [cls.code for cls in CLASSES]
    assert len(codes) == len(set(codes))
    for cls in CLASSES:
        assert "code" in vars(cls), f"{cls.__name__} inherits its code"
        assert re.fullmatch(r"[a-z][a-z_]*[a-z]", cls.code)
        assert ERRORS_BY_CODE[cls.code] is cls


def test_retryable_is_true_only_for_transport_internal_and_quotas() -> None:
    assert {cls.code for cls in CLASSES if cls.retryable} == RETRYABLE
    assert not e.LaneConflict.retryable  # resending unchanged cannot succeed


def test_the_branches_hold_their_leaves() -> None:
    branches = {
        e.RequestError: {
            "malformed_message",
            "invalid_request",
            "request_too_large",
            "not_canonicalizable",
            "unknown_event_type",
            "invalid_payload",
            "unauthorized",
        },
        e.StoreError: {
            "lane_conflict",
            "idempotency_violation",
            "entity_not_found",
            "duplicate_event",
            "subject_mismatch",
            "entity_conflict",
            "causation_violation",
            "tenant_mismatch",
            "signature_required",
            "invalid_signature",
            "blob_missing",
        },
        e.IntegrityError: {"chain_fault"},
        e.TransportError: {"timeout", "unavailable"},
    }
    for branch, leaves in branches.items():
        assert {cls.code for cls in CLASSES if cls is not branch and issubclass(cls, branch)} == leaves
    assert e.InternalError.__bases__ == (LedgerError,)


def test_the_docstring_tree_names_every_class_and_code() -> None:
    doc = e.__doc__ or ""
    for cls in CLASSES:
        assert cls.__name__ in doc
        if cls not in (LedgerError, e.RequestError, e.StoreError, e.TransportError):
            assert re.search(rf"\b{cls.__name__}\s+{cls.code}\b", doc), cls
    for cls in BY_REASON:
        assert re.search(rf"\b{cls.__name__}\s+{vars(cls)['reason']}\b", doc), cls


DETAILS = {
    "path": "$.events[2].occurred_at",
    "lane_id": "lane-1",
    "expected_last_seq": 5,
    "actual_last_seq": 7,
    "nested": {"fields": ["name", "kind"], "seq": None},
}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_wire_round_trip(cls: type[LedgerError]) -> None:
    original = cls("something was refused", **DETAILS)
    wire = original.to_wire()
    assert wire == {
        "code": cls.code,
        "message": "something was refused",
        "retryable": cls.retryable,
        "details": DETAILS,
    }
    # Through real bytes and the ErrorBody struct, as a receipt carries it.
    body = msgspec.json.decode(msgspec.json.encode(wire), type=ErrorBody)
    back = error_from_wire(body.code, body.message, body.details, body.retryable)
    assert type(back) is cls
    assert back.code == cls.code
    assert back.message == "something was refused"
    assert back.details == DETAILS
    assert back.retryable is cls.retryable
    assert str(back) == str(original)
    assert type(error_from_wire(**wire)) is cls


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_round_trip_without_details(cls: type[LedgerError]) -> None:
    back = error_from_wire(cls.code, "m")
    assert type(back) is cls and back.details == {} and back.message == "m"


def test_details_may_use_any_key() -> None:
    # Keys that collide with __init__'s own parameter names must still work.
    err = error_from_wire("entity_conflict", "m", {"message": "x", "self": 1, "kind": "actor"})
    assert isinstance(err, e.EntityConflict)
    assert err.message == "m"
    assert err.details == {"message": "x", "self": 1, "kind": "actor"}


def test_an_unknown_code_is_kept_as_a_generic_error() -> None:
    err = error_from_wire("rate_limited", "over quota", {"limit": 10}, True)
    assert type(err) is LedgerError
    assert err.code == "rate_limited"
    assert err.message == "over quota"
    assert err.details == {"limit": 10}
    assert err.retryable is True  # the wire's word, the only one there is
    assert err.to_wire() == {
        "code": "rate_limited",
        "message": "over quota",
        "retryable": True,
        "details": {"limit": 10},
    }
    assert str(err).startswith("rate_limited: over quota")
    # The class attribute is untouched for everyone else.
    assert LedgerError.code == "ledger_error" and LedgerError.retryable is False
    assert error_from_wire("rate_limited", "m").retryable is False


def test_a_known_code_takes_retryable_from_its_class() -> None:
    assert error_from_wire("lane_conflict", "m", None, True).retryable is False
    assert error_from_wire("timeout", "m", None, False).retryable is True


@pytest.mark.parametrize("cls", BY_REASON, ids=lambda c: c.__name__)
def test_a_checkpoint_refusal_comes_back_as_its_subclass_with_the_parent_code(cls: type[LedgerError]) -> None:
    reason = vars(cls)["reason"]
    err = cls("refused", kind="x", reason=reason)
    assert err.code in ("entity_conflict", "entity_not_found", "integrity_failure")
    assert "code" not in vars(cls)
    assert not err.retryable
    assert err.http_status == ERRORS_BY_CODE[err.code].http_status
    assert ERRORS_BY_REASON[(err.code, reason)] is cls
    body = msgspec.json.decode(msgspec.json.encode(err.to_wire()), type=ErrorBody)
    back = error_from_wire(body.code, body.message, body.details, body.retryable)
    assert type(back) is cls and back.details == {"kind": "x", "reason": reason}
    assert isinstance(back, ERRORS_BY_CODE[err.code])  # `except EntityConflict` still catches it
    # The reason alone picks nothing: under another code it is that code's class.
    assert type(error_from_wire("lane_conflict", "m", {"reason": reason})) is e.LaneConflict


def test_without_a_known_reason_the_class_of_the_code_comes_back() -> None:
    for details in ({"kind": "lane"}, {"reason": "no_such_reason"}, {"reason": ["revision_conflict"]}):
        assert type(error_from_wire("entity_conflict", "m", details)) is e.EntityConflict
    assert type(error_from_wire("entity_not_found", "m")) is e.EntityNotFound


def test_receipt_and_reply_carry_the_body() -> None:
    err = e.LaneConflict("head moved", lane_id="l", expected_last_seq=1, actual_last_seq=2)
    receipt = msgspec.json.decode(
        msgspec.json.encode({"outcome": "rejected", "error": err.to_wire(), "append_id": "a"}), type=Receipt
    )
    assert isinstance(receipt, AppendRejected)
    assert isinstance(error_from_wire(**msgspec.structs.asdict(receipt.error)), e.LaneConflict)
    reply = msgspec.json.decode(msgspec.json.encode({"status": "error", "error": err.to_wire()}), type=Reply)
    assert isinstance(reply, ReplyError)
    assert reply.error.details == {"lane_id": "l", "expected_last_seq": 1, "actual_last_seq": 2}


def test_every_wire_sends_all_four_fields_and_reads_a_body_without_the_defaults() -> None:
    """One ErrorBody: a NATS receipt and an HTTP error carry the same four
    fields, even at their defaults; an older peer's body without them reads."""
    err = e.EntityNotFound("no such lane", kind="lane")
    quiet = ErrorBody(code="entity_not_found", message="no such lane")
    rejected = msgspec.json.decode(
        msgspec.json.encode(AppendRejected(error=quiet, append_id="a")), type=dict[str, object]
    )
    assert rejected["error"] == {
        "code": "entity_not_found",
        "message": "no such lane",
        "retryable": False,
        "details": {},
    }
    http = msgspec.json.decode(error_response(err).body, type=dict[str, object])
    assert http == {"error": err.to_wire()} and set(err.to_wire()) == {
        "code",
        "message",
        "retryable",
        "details",
    }
    assert msgspec.json.decode(b'{"code": "x", "message": "m"}', type=ErrorBody) == ErrorBody(
        code="x", message="m"
    )


def test_the_documents_error_schemas_are_the_structs_with_every_field_required() -> None:
    schemas = error_schemas()
    assert schemas["ErrorBody"]["required"] == ["code", "message", "retryable", "details"]
    assert schemas["ErrorBody"]["additionalProperties"] is False
    assert schemas["Error"]["properties"]["error"] == {"$ref": "#/components/schemas/ErrorBody"}
    assert schemas["Error"]["required"] == ["error"]


class Inner(msgspec.Struct, omit_defaults=True):  # sends what is not at its default
    a: int
    b: int = 0


class Outer(msgspec.Struct):  # sends every field but those left UNSET
    inner: list[Inner]
    count: int = 0
    names: list[str] = msgspec.field(default_factory=list)
    note: str | msgspec.UnsetType = msgspec.UNSET


def test_a_struct_that_sends_its_defaults_has_them_required_and_unset_fields_stay_optional() -> None:
    _, schemas = msgspec.json.schema_components((Outer,), ref_template=SCHEMA_REF)
    require_what_is_sent(schemas, (Outer,))
    assert schemas["Outer"]["required"] == ["inner", "count", "names"]
    assert schemas["Inner"]["required"] == ["a"]


# -- spec/errors.md cannot drift ------------------------------------------------------


def _doc_table_codes() -> list[str]:
    section = ERRORS_MD.split("\n## Codes\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header[:2] == ["code", "exception class"]
    assert set(rows[1]) <= set("|- ")
    codes = []
    for row in rows[2:]:
        first = row.strip("|").split("|")[0].strip()
        match = re.fullmatch(r"`([a-z_]+)`", first)
        assert match, row
        codes.append(match.group(1))
    return codes


def test_errors_md_lists_exactly_the_codes_that_exist() -> None:
    codes = _doc_table_codes()
    assert len(codes) == len(set(codes)), "a code is listed twice"
    assert set(codes) == set(ERRORS_BY_CODE)


def test_errors_md_rows_name_the_right_class_and_retryability() -> None:
    section = ERRORS_MD.split("\n## Codes\n", 1)[1].split("\n## ", 1)[0]
    for row in [line for line in section.splitlines() if line.startswith("| `")]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        code, cls_name, retryable = cells[0].strip("`"), cells[1].strip("`"), cells[4]
        cls = ERRORS_BY_CODE[code]
        assert cls.__name__ == cls_name, code
        if cls is not LedgerError:  # the root row says "as sent"
            assert retryable == ("yes" if cls.retryable else "no"), code


def test_errors_md_http_table_maps_every_code_once() -> None:
    section = ERRORS_MD.split("\n## HTTP status\n", 1)[1]
    seen: list[str] = []
    for row in [line for line in section.splitlines() if re.match(r"\| \d{3} ", line)]:
        seen += re.findall(r"`([a-z_]+)`", row)
    assert len(seen) == len(set(seen))
    # The root has no row of its own: an unknown code is a 500.
    assert set(seen) == set(ERRORS_BY_CODE) - {"ledger_error"}


def _doc_http_statuses() -> dict[str, int]:
    section = ERRORS_MD.split("\n## HTTP status\n", 1)[1].split("\n## ", 1)[0]
    return {
        code: int(row[2:5])
        for row in section.splitlines()
        if re.match(r"\| \d{3} ", row)
        for code in re.findall(r"`([a-z_]+)`", row)
    }


def test_every_code_has_the_documented_http_status() -> None:
    # One home: the class's http_status, which both HTTP services answer
    # with (laneledger.runtime.httpjson), including codes they rarely raise.
    documented = _doc_http_statuses()
    assert set(documented) == set(ERRORS_BY_CODE) - {"ledger_error"}
    for code, cls in ERRORS_BY_CODE.items():
        expected = documented.get(code, 500)  # the root, like an unknown code, is a 500
        assert cls.http_status == expected, code
        response = error_response(cls("x"))
        assert response.status == expected, code
        assert msgspec.json.decode(response.body)["error"]["code"] == code
        assert ("WWW-Authenticate" in response.headers) is (code == "unauthorized"), code
    assert error_response(error_from_wire("brand_new", "x")).status == 500
    assert error_response(e.Unauthorized("x")).headers["WWW-Authenticate"] == 'Bearer realm="laneledger"'
