"""Per-agent certification: intents, proposals, locks, signatures, durability votes, the
chain and catch-up (engine.md §5).

`protocol` holds the closed protocol objects and their pure checks, `crypto` the Ed25519
signing and verification; nothing is exported from the package yet.
"""
