"""Writes the scenario folders: multi-source incidents as a responder hands them over.

The folders are the fixtures and are committed; this script documents how their lines were made
(one clock per incident, dmesg seconds from a boot time, the ranks' collective start times) and
regenerates them: ``python -m tests.scenarios.generate``. Nothing here is read by the tests.
"""

from __future__ import annotations

import shutil

from tests.scenarios import inference_incidents, training_incidents  # noqa: F401  (importing registers them)
from tests.scenarios.formats import HERE, SCENARIOS


def main() -> None:
    for name, build in SCENARIOS.items():
        folder = HERE / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        build(folder)
        print(f"wrote {name}")


if __name__ == "__main__":
    main()
