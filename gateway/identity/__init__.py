"""Keys, agent cards and their signatures: the leaf that the engine and the Registry share.

`keys` is Ed25519 over domain-separated canonical objects, `objects` the strict decoding rules
every protocol object follows, `cards` the Registry's signed agent cards. Nothing here imports
another gateway package but `harness_contract`.
"""
