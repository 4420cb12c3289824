"""Development tooling: a real nats-server (and a cluster of them) for tests
and ``laneledger up``, and the demo harness. Not used by the services.
"""
