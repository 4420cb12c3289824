"""The producer SDK: ``LedgerClient`` and ``LaneRecorder``, the attempt
guard, the checkpoint client, and the blob stores they write to.
"""
