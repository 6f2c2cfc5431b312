"""`harness.v1.ClusterPeerService` over a `ClusterHintsPort` (cluster.md §3.4).

Every replica of a cluster serves it to the others. Each call is admitted by the
`PeerGuard` (the cluster's peer token, `harness-version`), checked, and handed to the port's
`on_hint`, which only schedules work; the answer is empty and immediate. The rows are the
record, so this edge trusts a hint no further than "look now": the receiver reads the rows
before it acts and ignores what it does not own.

Failures: a request naming more than `MAX_HINT_ITEMS` entries in total, without
`from_replica`, or with a settled post that is not `<AgentId>/<PostId>` is INVALID_ARGUMENT
(`invalid-request` naming the field), and the port sees none of it.
"""

from __future__ import annotations

from typing import Final

from harness_contract._gen.harness.v1 import cluster_pb2, cluster_pb2_grpc
from harness_contract.errors import InvalidRequestError

from gateway.cluster.hints import MAX_HINT_ITEMS, ClusterHintsPort, parse_settled_post
from gateway.rpc.errors import Context, unary_rpc
from gateway.rpc.peer import PeerGuard
from gateway.rpc.server import ServiceBinding

CLUSTER_PEER_SERVICE: Final = cluster_pb2.DESCRIPTOR.services_by_name[
    "ClusterPeerService"
].full_name
"""`harness.v1.ClusterPeerService`: its health name and reflection entry."""


def _checked(request: cluster_pb2.HintRequest) -> None:
    """Raise `InvalidRequestError` for a request the port must not see."""
    total = len(request.conversations) + len(request.settled_posts) + len(request.delivery_agents)
    if total > MAX_HINT_ITEMS:
        raise InvalidRequestError.of_field(
            f"conversations, settled_posts, delivery_agents: {total} entries, "
            f"at most {MAX_HINT_ITEMS} in one hint"
        )
    if not request.from_replica:
        raise InvalidRequestError.of_field("from_replica: required")
    for entry in request.settled_posts:
        if parse_settled_post(entry) is None:
            raise InvalidRequestError.of_field(
                f"settled_posts: {entry[:80]!r} is not <AgentId>/<PostId>"
            )


class ClusterPeerService(cluster_pb2_grpc.ClusterPeerServiceServicer):
    """The cluster peers' gRPC face over one `ClusterHintsPort`."""

    def __init__(self, hints: ClusterHintsPort, guard: PeerGuard) -> None:
        self._hints = hints
        self._guard = guard

    def binding(self) -> ServiceBinding:
        """This servicer as a `ServiceBinding` for `build_server` / `build_peer_server`."""
        return ServiceBinding(
            name=CLUSTER_PEER_SERVICE,
            add=lambda server: cluster_pb2_grpc.add_ClusterPeerServiceServicer_to_server(
                self, server
            ),
        )

    @unary_rpc
    async def Hint(  # noqa: N802 - the gRPC method name
        self, request: cluster_pb2.HintRequest, context: Context
    ) -> cluster_pb2.HintResponse:
        """cluster.md §3.4: schedule what the hint names, answer at once."""
        await self._guard.admit(context)
        _checked(request)
        self._hints.on_hint(
            request.from_replica,
            tuple(request.conversations),
            tuple(request.settled_posts),
            tuple(request.delivery_agents),
        )
        return cluster_pb2.HintResponse()


__all__ = ["CLUSTER_PEER_SERVICE", "ClusterPeerService"]
