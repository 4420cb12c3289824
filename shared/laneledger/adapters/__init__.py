"""Adapters that let agent frameworks persist to laneledger (``langgraph``)."""
