"""Sub-commands of gpuwb, one module each (NAME, HELP, add_arguments, run)."""
