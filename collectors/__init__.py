"""Evidence collectors: one module per source, discovered by the registry."""
