"""The SQLite ledger: schema, the single writer, and reads; ``sqlite``: how
every laneledger SQLite file (the services' too) is opened, written and read."""

from laneledger.store.reader import LedgerReader
from laneledger.store.schema import open_ledger
from laneledger.store.writer import BatchResult, CommittedRecord, LedgerWriter

__all__ = ["BatchResult", "CommittedRecord", "LedgerReader", "LedgerWriter", "open_ledger"]
