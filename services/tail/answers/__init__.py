"""The tail's JSON answers as msgspec Structs, one module per family of
routes: what the handlers answer with, and what the OpenAPI document's
schemas are generated from (``services/tail/routetable.py``), so a field is
named, typed and bounded in one place.

Every field is present in an answer (required in the schema,
``apidoc.require_what_is_sent``) unless its default is ``UNSET``: those are
left out when they do not apply.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from laneledger.contract.model import MAX_WIRE_INT, WireCount

Position = Annotated[int, Meta(ge=1, le=MAX_WIRE_INT)]  # a ledger position, a lane seq
Count = WireCount  # a number of things; a position or 0 (nothing applied yet)
Decimal = Annotated[str, Meta(pattern=r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$")]  # an exact amount


STRUCTURE_COMPLETE = Meta(
    description="always true: the structure is read page by page (load_structure); "
    "kept for the clients that check it"
)


class Answer(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the answers: keyword-only, and no field beyond those declared
    (``additionalProperties: false`` in the document)."""
