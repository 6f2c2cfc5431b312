"""The benchmark harness: ``python -m bench`` (``make bench``). See bench/README.md."""

from __future__ import annotations
