"""What the services share at run time: settings, the ops HTTP surface,
access tokens, following the committed stream, request/reply serving and the
rendered NATS configuration. Not part of the SDK.
"""
