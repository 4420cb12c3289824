"""laneledger's MCP server (``laneledger mcp``; normative text: ``spec/mcp.md``).

It is a client of a tail service: every resource read and tool call is one
or a few HTTP requests to the tail's indexed routes (``/api/korg/…``, the
proofs, the Korg write route), made with the caller's own token, and change
notifications come from the tail's live SSE. Built on the official MCP SDK
(``mcp``): ``uris`` parses ``korg://`` and ``laneledger://`` URIs,
``tailclient`` talks to the tail, ``subscriptions`` keeps §8.5's registry,
``server`` wires the SDK's low-level ``Server``, ``serve`` runs it over
stdio or streamable HTTP.
"""
