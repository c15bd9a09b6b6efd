"""Helpers that know nothing of gpu-rent: atomic writes, locks, processes, lazy imports, notifications."""
