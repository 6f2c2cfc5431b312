"""Suite-wide test settings."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Timings belong in benchmarks, not in tests that fail on a slow or busy machine: property
# tests run without a per-example deadline, and a slow data generator is not a failure.
settings.register_profile("harness", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("harness")
