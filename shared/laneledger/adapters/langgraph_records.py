"""How a LangGraph checkpoint is stored in laneledger (normative text:
``spec/langgraph.md``): the checkpoint keys, the ids, the JSON state of each
record, and redaction of values before LangGraph's serde turns them into
bytes. Pure functions: no I/O, so the mapping can be tested on its own.

* a thread's namespaces: key ``langgraph/<thread>``, its latest revision
  ``{"namespaces": [...]}``;
* a (thread, namespace)'s checkpoints: key ``langgraph/<thread>/ns/<ns>``,
  one revision per LangGraph checkpoint, whose laneledger id is derived from
  (thread, namespace, checkpoint id) so ``get`` finds it directly;
* a checkpoint's pending writes: key ``<ns key>/writes/<record id>``, its
  latest revision holding every write (``put_writes`` merges).

Thread ids and namespaces are percent-encoded in keys, so a ``/`` in either
cannot make two keys collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from laneledger.contract.errors import InvalidRequest
from laneledger.contract.ids import derived_id
from laneledger.contract.model import MAX_ID_LENGTH
from laneledger.contract.redaction import KEY_RULE, Redactor, is_marker, marker

CHECKPOINT_FORMAT = "application/vnd.langgraph.checkpoint+json;version=1"
WRITES_FORMAT = "application/vnd.langgraph.writes+json;version=1"
THREAD_FORMAT = "application/vnd.langgraph.thread+json;version=1"

# The lane events the saver appends (spec/langgraph.md, "The ledger record").
CHECKPOINT_EVENT = "lane.framework.langgraph.checkpoint"
WRITES_EVENT = "lane.framework.langgraph.writes"
ERASED_EVENT = "lane.framework.langgraph.erased"

ROOT_LANE = "main"  # the lane of the root namespace ""
DEFAULT_RUN = "langgraph"  # the run of checkpoints whose metadata names none

Typed = tuple[str, bytes]


def _checked_key(key: str, what: str) -> str:
    if len(key) > MAX_ID_LENGTH:
        raise InvalidRequest(
            f"the {what} makes a checkpoint key of {len(key)} characters, over {MAX_ID_LENGTH}",
            path="$.configurable",
            key_length=len(key),
            limit=MAX_ID_LENGTH,
        )
    return key


KEY_PREFIX = "langgraph/"  # every key the saver writes starts so


def thread_key(thread_id: str) -> str:
    return _checked_key(KEY_PREFIX + quote(thread_id, safe=""), "thread_id")


def ns_key(thread_id: str, checkpoint_ns: str) -> str:
    return _checked_key(thread_key(thread_id) + "/ns/" + quote(checkpoint_ns, safe=""), "checkpoint_ns")


def record_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The laneledger checkpoint id of one LangGraph checkpoint."""
    return derived_id("langgraph", thread_id, checkpoint_ns, checkpoint_id)


def writes_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    return writes_key_of(ns_key(thread_id, checkpoint_ns), record_id(thread_id, checkpoint_ns, checkpoint_id))


def writes_key_of(namespace_key: str, record: str) -> str:
    """From what a revision listing shows (its key and id), without its state."""
    return namespace_key + "/writes/" + record


def lane_name(checkpoint_ns: str) -> str:
    return checkpoint_ns or ROOT_LANE


# -- typed values as JSON ------------------------------------------------------------------


def encode_bytes(data: bytes) -> str:
    """Serde bytes as lowercase hex: no default redaction rule can match such
    text (the rules need capitals, other letters, ``-``, ``_``, ``:``, ``=``,
    dots or spaces), so redacting a record never rewrites its bytes. Base64
    could: ``+AIza`` and 35 letters or digits is a Google key's shape. Hex
    rather than base32: Python encodes and decodes hex in C."""
    return data.hex()


def decode_bytes(text: str, path: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise InvalidRequest("a stored LangGraph value is not hex", path=path) from None


def typed_json(typed: Typed) -> list[str]:
    kind, data = typed
    return [kind, encode_bytes(data)]


def json_typed(value: Any, path: str) -> Typed:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
    ):
        raise InvalidRequest("a stored LangGraph value is not [type, hex]", path=path)
    return value[0], decode_bytes(value[1], path)


def field(state: Mapping[str, Any], name: str, kind: type, path: str) -> Any:
    """A field of a stored record, of the type the saver wrote."""
    value = state.get(name)
    if not isinstance(value, kind):
        raise InvalidRequest(
            f"a stored LangGraph record has no {kind.__name__} {name!r}", path=f"{path}.{name}"
        )
    return value


def rows(state: Mapping[str, Any], name: str, width: int, path: str) -> list[list[Any]]:
    """A list field whose items are lists of ``width`` values."""
    items: list[list[Any]] = field(state, name, list, path)
    for i, item in enumerate(items):
        if not isinstance(item, list) or len(item) != width:
            raise InvalidRequest(
                f"a stored LangGraph record's {name} holds other than {width}-item lists",
                path=f"{path}.{name}[{i}]",
            )
    return items


# -- redaction -----------------------------------------------------------------------------


def redact_value(value: Any, redactor: Redactor) -> Any:
    """``value`` with its secrets replaced, before serde makes it opaque
    bytes: JSON-shaped values (dicts, lists, strings) as everywhere else,
    and pydantic models (LangChain messages) through their JSON dump, rebuilt
    only when something was replaced. Other objects are stored as they are
    (spec/langgraph.md, "Redaction")."""
    if isinstance(value, (str, list, dict)) and redactor.surely_clean(value):
        return value
    if isinstance(value, str):
        return redactor.redact(value).value
    if isinstance(value, dict):
        # The key rule as the redactor's own walk applies it, then each item
        # (which may be a model the walk would not enter).
        return {
            k: marker(KEY_RULE)
            if isinstance(k, str)
            and isinstance(v, (str, dict, list))
            and v != ""
            and not is_marker(v)
            and redactor.is_secret_key(k)
            else redact_value(v, redactor)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_value(v, redactor) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v, redactor) for v in value)
    dump = getattr(value, "model_dump", None)
    validate = getattr(type(value), "model_validate", None)
    if callable(dump) and callable(validate):
        raw = dump(mode="json")
        if redactor.surely_clean(raw):
            return value
        done = redactor.redact(raw)
        if done.count:
            try:
                return validate(done.value)
            except Exception:  # noqa: BLE001 - a model that will not rebuild is kept, its dump redacted
                return done.value
    return value
