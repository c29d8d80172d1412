"""Where evidence and responder work are kept: the bundle file, its schema, seals, the journal."""
