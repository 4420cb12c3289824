"""The SQLite ledger: schema, the single writer, and reads."""

from .reader import LedgerReader
from .schema import open_ledger
from .writer import BatchResult, CommittedRecord, LedgerWriter

__all__ = ["BatchResult", "CommittedRecord", "LedgerReader", "LedgerWriter", "open_ledger"]
