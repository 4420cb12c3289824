"""laneledger: an execution ledger for AI-agent harnesses over NATS JetStream."""

__version__ = "0.1.0"
