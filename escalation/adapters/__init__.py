"""Adapters at the edge: Redis scheduler, PostgreSQL audit store, ladder files, services."""
