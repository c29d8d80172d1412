"""GPU incident workbench: evidence bundles, root-cause analysis and postmortems."""

__version__ = "0.1.0"
