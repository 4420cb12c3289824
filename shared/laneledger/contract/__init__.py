"""The wire contract (normative text: ``spec/``): messages and stored objects,
error codes, canonical JSON, hash chains, subjects, the vocabulary, content
references, redaction and signatures. What a producer in any language must
match; no I/O.
"""
