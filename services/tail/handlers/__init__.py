"""The tail's HTTP handlers, one module per family of routes. Each decodes
its request's parameters into the route's Struct (``queries.py``, through
``api.decode_parameters``), asks the read model (``readmodel``, its
projections) or the sequencer, and answers with the route's Struct
(``answers/``). Answers written a piece at a time, so a large one holds
bounded memory (history pages, the live tail's events, Korg's journal, a
session's proof bundle), follow those shapes without being encoded from
one. ``service.py`` wires the handlers into the app; ``routetable.py``
documents them."""
