"""Optimistic transactions and the conflict checker. Never imports Spark."""
