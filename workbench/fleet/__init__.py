"""Across incidents: the history of many bundles."""
