"""One hosted agent's endpoint: the API the RPC layer sees (`api`), the send pipeline
(`runtime`), the inbox and its stream (`inbox`), idempotent sends and the history export.
"""
