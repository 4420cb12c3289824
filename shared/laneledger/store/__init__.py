"""The SQLite ledger: schema, the single writer, and reads (how every
laneledger SQLite file is opened, written and read: ``laneledger.sqlite``)."""

from laneledger.store.batch import BatchResult, CommittedRecord
from laneledger.store.reader import LedgerReader
from laneledger.store.schema import open_ledger
from laneledger.store.writer import LedgerWriter

__all__ = ["BatchResult", "CommittedRecord", "LedgerReader", "LedgerWriter", "open_ledger"]
