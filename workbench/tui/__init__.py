"""The incident cockpit (``gpuwb open``): a Textual terminal UI over one bundle.

Only this package imports Textual. Screens read through the query layer (``workbench.query``,
``workbench.findings``, ``workbench.artifact_text``, the report model) and write through
``workbench.journal``; none of them holds SQL. Every bundle access is a short connection
(``workbench.shared_bundle``) so two responders can work on one bundle at once.
"""
