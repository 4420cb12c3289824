"""Whole-ledger verification (``laneledger verify``; normative text:
``spec/verify.md``).
"""
