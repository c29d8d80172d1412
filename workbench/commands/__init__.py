"""Sub-commands of gpuwb, one module each (NAME, HELP, add_arguments, run); ``_``-prefixed modules are
their shared helpers, not commands. ``workbench.cli`` finds them with :func:`collectors.framework.plugins.discover`."""
