"""The local firewall (firewall.md): middlewares that guide, refuse and withhold.

What other packages may import is listed in `__all__`.
"""

from __future__ import annotations

from gateway.firewall.model import (
    CheckInput,
    Direction,
    ExternalCaller,
    Judgement,
    MiddlewareError,
    MiddlewareKind,
    Subject,
    SubjectRole,
    Verdict,
)
from gateway.firewall.pipeline import DeliveryVerdict, Firewall, FirewallObserver
from gateway.firewall.spec import ExternalSpec, FirewallSpec

__all__ = [
    "CheckInput",
    "DeliveryVerdict",
    "Direction",
    "ExternalCaller",
    "ExternalSpec",
    "Firewall",
    "FirewallObserver",
    "FirewallSpec",
    "Judgement",
    "MiddlewareError",
    "MiddlewareKind",
    "Subject",
    "SubjectRole",
    "Verdict",
]
