"""Playbooks, the Xid catalog and the cause catalog, shipped as package data."""
