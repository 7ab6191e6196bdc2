"""Adapters that put other frameworks' state on a mnemostore `Store` (each imports its framework itself)."""
