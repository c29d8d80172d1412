"""The incident cockpit (``gpuwb open``): a Textual terminal UI over one bundle.

Only this package imports Textual. Screens read through the query layer (``workbench.query.events``,
``workbench.analysis.findings``, ``workbench.query.artifact_text``, the report model) and write through
``workbench.store.journal``; none of them holds SQL. Every bundle access is a short connection
(``workbench.store.shared_bundle``) so two responders can work on one bundle at once.
"""
