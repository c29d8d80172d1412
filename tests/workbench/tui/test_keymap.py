"""One keymap: no screen key hides a global one, and the README's key table is the registry's."""

from __future__ import annotations

from pathlib import Path

from textual.binding import Binding

from workbench.tui import keymap
from workbench.tui.screens import all_specs
from workbench.tui.screens.base import Spec

ROOT = Path(__file__).resolve().parents[3]


def test_no_screen_shadows_a_global_key() -> None:
    assert keymap.shadowed(all_specs()) == []


def test_a_screen_binding_on_a_global_key_is_caught() -> None:
    class Shadowing:
        BINDINGS = [Binding("o", "override", "override")]

    specs = [*all_specs(), Spec(name="zz", key="Z", title="Z", order=99, factory=Shadowing)]
    assert keymap.shadowed(specs) == ["Z: o (override) hides o (Overview)"]


def test_the_readme_key_table_is_generated_from_the_registry() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("-->\n", text.index("<!-- keys:")) + 4
    assert text[start:text.index("<!-- /keys -->")] == keymap.key_table(all_specs())
