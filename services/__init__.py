"""The four services, each its own process (``python -m laneledger.services.<name>``):
the sequencer, the tail, metrics and checkpoint."""
