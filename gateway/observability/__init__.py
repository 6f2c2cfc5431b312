"""Metrics (one registry, closed label sets), the read gauges, the `/metrics` server and
the JSON logs with their secret redaction.
"""
