"""A session's history as data: the causal graph (Korg §2), and
branching it without changing it (rewind, fork).
"""
