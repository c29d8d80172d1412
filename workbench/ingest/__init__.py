"""Bytes in, rows out: sniffing, archives, parsing on two cores, derivations, merging bundles."""
