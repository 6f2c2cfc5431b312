"""Bearer tokens at the RPC boundary (operations.md §4).

Agents call `HarnessEndpointService` with their own token, operators call
`ManagementService` with the admin token; a token of the other role is PERMISSION_DENIED
(`wrong-role`), a missing, malformed, unknown or revoked one UNAUTHENTICATED with a
`harness.v1.AuthenticationError` detail of that reason (`authentication_reason`). The token
is never logged, never put in an error, and never kept past the call.
"""

from __future__ import annotations

from typing import Any, Final, assert_never

import grpc
from harness_contract.errors import AuthenticationErrorReason

from gateway.endpoint.api import AuthFailure, Endpoint, GatewayCore

AUTHORIZATION_KEY: Final = "authorization"
"""The metadata key carrying `Bearer <token>` (gRPC lowercases metadata keys)."""

BEARER_SCHEME: Final = "bearer"
"""The only accepted scheme, compared case-insensitively (RFC 7235 §2.1)."""


class AuthRefused(Exception):
    """The call's token was refused; `failure` says why (never the token itself)."""

    def __init__(self, failure: AuthFailure, detail: str) -> None:
        super().__init__(detail)
        self.failure = failure
        self.detail = detail


def authentication_reason(failure: AuthFailure) -> AuthenticationErrorReason | None:
    """The `AuthenticationError` reason of a refused token; None for `wrong-role`, which is
    PERMISSION_DENIED (the token is valid, for the other API)."""
    match failure:
        case AuthFailure.MISSING:
            return AuthenticationErrorReason.MISSING
        case AuthFailure.MALFORMED:
            return AuthenticationErrorReason.MALFORMED
        case AuthFailure.UNKNOWN:
            return AuthenticationErrorReason.UNKNOWN
        case AuthFailure.REVOKED:
            return AuthenticationErrorReason.REVOKED
        case AuthFailure.WRONG_ROLE:
            return None
        case _:
            assert_never(failure)


def bearer_token(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """The token of the call's `authorization: Bearer <token>` metadata.

    Raises `AuthRefused` `missing` without the metadata and `malformed` when it is not
    exactly one scheme and one token."""
    values = [
        value for key, value in (context.invocation_metadata() or ()) if key == AUTHORIZATION_KEY
    ]
    if not values:
        raise AuthRefused(AuthFailure.MISSING, "the call has no authorization metadata")
    if len(values) > 1 or not isinstance(values[0], str):
        raise AuthRefused(AuthFailure.MALFORMED, "the authorization metadata is not Bearer <token>")
    scheme, _, token = values[0].partition(" ")
    # `split()` keeps a token whole only when no character of it is white space (the
    # same test as `str.isspace`), in one C call instead of a Python step per character.
    if scheme.lower() != BEARER_SCHEME or not token or token.split() != [token]:
        raise AuthRefused(AuthFailure.MALFORMED, "the authorization metadata is not Bearer <token>")
    return token


async def authenticate_agent(
    core: GatewayCore, context: grpc.aio.ServicerContext[Any, Any]
) -> Endpoint:
    """The endpoint the call's agent token names; the admin token is `wrong-role`."""
    endpoint = await _token_owner(core, context)
    if endpoint is None:
        raise _wrong_role(core, "the admin token cannot call the agent API")
    return endpoint


async def authenticate_admin(
    core: GatewayCore, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """Accept only the admin token; an agent's token is `wrong-role`."""
    if await _token_owner(core, context) is not None:
        raise _wrong_role(core, "an agent token cannot call the management API")


async def _token_owner(
    core: GatewayCore, context: grpc.aio.ServicerContext[Any, Any]
) -> Endpoint | None:
    """The endpoint the call's agent token names, None for the admin token; `AuthRefused`
    for any other, counted (`core.on_auth_refused`) before it is raised."""
    try:
        token = bearer_token(context)
        if core.agents.is_admin(token):
            return None
        result = await core.agents.authenticate(token)
        if isinstance(result, AuthFailure):
            raise AuthRefused(result, _FAILURE_TEXTS.get(result, "the token was refused"))
    except AuthRefused as refused:
        core.on_auth_refused(refused.failure)
        raise
    return result


def _wrong_role(core: GatewayCore, detail: str) -> AuthRefused:
    """The refusal of a valid token of the other role, counted."""
    core.on_auth_refused(AuthFailure.WRONG_ROLE)
    return AuthRefused(AuthFailure.WRONG_ROLE, detail)


_FAILURE_TEXTS: Final = {
    AuthFailure.UNKNOWN: "the token is not known to this gateway",
    AuthFailure.REVOKED: "the token was revoked",
    AuthFailure.MISSING: "the call has no authorization metadata",
    AuthFailure.MALFORMED: "the authorization metadata is not Bearer <token>",
    AuthFailure.WRONG_ROLE: "the token belongs to the other API",
}
