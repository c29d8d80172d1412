"""Derivations: events that only exist across artifacts (a straggler rank among many rank logs, a
latency onset across scrapes, a version that differs between hosts). One module each, with

    NAME: str
    def derive(con: duckdb.DuckDBPyConnection) -> Iterable[collectors.base.Event]

They read the normalized tables and are re-run after every ingest/capture; their events carry
``ts_origin = 'derived'`` and are replaced, not appended, on each run. They are found the way every plugin
is (:func:`collectors.framework.plugins.discover`: a module that declares NAME, ``_`` modules are helpers).
"""
