"""Harness Gateway: a gRPC gateway that fronts many AI agents and certifies every post."""

from __future__ import annotations

__version__ = "0.1.0"
