"""Per-agent certification: intents, proposals, locks, signatures, durability votes, the
chain and catch-up (engine.md §5).

`protocol` holds the closed protocol objects and their pure checks (keys and cards come from
the leaf `gateway.identity`), `certifier` the Router path's pure state machine, `local` the
sequencer of conversations hosted wholly here, `network` the shell that feeds both and owns
binding, and `local_move` the start-up move of existing conversations onto local order.
Nothing is exported from the package itself: callers import the module they need.
"""
