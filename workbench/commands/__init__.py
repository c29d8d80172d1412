"""Sub-commands of gpuwb, one module each (NAME, HELP, add_arguments, run); ``_``-prefixed modules are
their shared helpers, not commands."""
