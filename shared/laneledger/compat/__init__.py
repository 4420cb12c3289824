"""Other formats and tools laneledger speaks: Claude Code stream-json
captures and Korg's korg-ledger-v1 journals.
"""
