"""Jinja2 templates of the postmortem (Markdown and HTML), shipped as package data."""
