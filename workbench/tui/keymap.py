"""Every key of the cockpit in one registry: the app's own keys, each screen's switch key (its Spec), and
each screen's BINDINGS. A screen key that shadows a global one is a bug (the README promises `o` goes to
Overview everywhere), so :func:`shadowed` lists them and a test keeps the list empty; the README's key
table is :func:`key_table`'s output, checked by the same test."""

from __future__ import annotations

from textual.binding import Binding

from workbench.tui.screens.base import Spec

APP_BINDINGS = [
    Binding("q", "quit", "quit", priority=False),
    Binding("question_mark", "help", "help", key_display="?"),
    Binding("escape", "back", "back", show=False),
]
"""The app's own keys, bound on every screen; ``ctrl+p`` (every action by name) is Textual's palette."""
_PALETTE = "ctrl+p"
_SHOWN = {"question_mark": "?", "slash": "/", "right_square_bracket": "]", "left_square_bracket": "["}


def display(key: str) -> str:
    return _SHOWN.get(key, key)


def global_keys(specs: list[Spec]) -> dict[str, str]:
    """Key -> what it does, on every screen."""
    keys = {b.key: b.description for b in APP_BINDINGS}
    keys[_PALETTE] = "every action by name"
    keys.update({s.key: s.title for s in specs})
    return keys


def screen_bindings(spec: Spec) -> list[Binding]:
    """The screen's own keys, as its class declares them."""
    return [b if isinstance(b, Binding) else Binding(*b) for b in getattr(spec.factory, "BINDINGS", [])]


def shadowed(specs: list[Spec]) -> list[str]:
    """Screen keys that hide a global key on that screen: each one breaks 'this key works everywhere'."""
    taken = global_keys(specs)
    return [f"{spec.title}: {display(b.key)} ({b.description}) hides {display(b.key)} ({taken[b.key]})"
            for spec in specs for b in screen_bindings(spec) if b.key in taken]


def key_table(specs: list[Spec]) -> str:
    """The README's key table: the global keys, then each screen's own."""
    switch = " ".join(f"`{s.key}`" for s in specs)
    rows = ["| key | where | what |", "|---|---|---|",
            f"| {switch} | everywhere | {', '.join(s.title for s in specs)} |",
            f"| `?` / `{_PALETTE}` / `esc` / `q` | everywhere "
            "| the screen's keys / every action by name / back / quit |"]
    for spec in specs:
        own = screen_bindings(spec)
        if own:
            keys = " ".join(f"`{b.key_display or display(b.key)}`" for b in own)
            rows.append(f"| {keys} | {spec.title} | {', '.join(b.description for b in own)} |")
    return "\n".join(rows) + "\n"
