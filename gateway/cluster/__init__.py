"""Cluster mode: replicas of one gateway sharing one PostgreSQL database (issue 25)."""
