"""The flight recorder behind ``gpuwb record``: a cheap on-disk ring of a node's evidence, frozen
into a sealed bundle the moment something goes wrong.

The long-running process (``daemon.py``) imports only this package and the collectors' line
parsers, never DuckDB, so that it stays small; freezing runs in its own process (``freeze.py``).
"""
