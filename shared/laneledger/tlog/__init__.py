"""A verifiable ledger (spec/tlog.md): every committed position is a leaf of
an RFC 6962 Merkle tree, whose heads are signed as C2SP checkpoints.

* ``merkle``: leaf and node hashes, roots, inclusion and consistency proofs
  from any source of subtree hashes, and their verification (RFC 9162);
* ``store``: the tree's hashes in the ledger's SQLite file;
* ``note``: C2SP signed notes, Ed25519 keys in their text form;
* ``checkpoint``: the C2SP tlog-checkpoint body;
* ``cosignature``: C2SP tlog-cosignature/v1 (witness cosignatures);
* ``witness``: cosigns a checkpoint once the tree is shown to have grown;
* ``leaves``: which leaf an event is;
* ``bundle``: offline bundles (C2SP tlog-proof): an event, its proof, a checkpoint.
"""
