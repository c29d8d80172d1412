"""Evidence taken from a live host: the one-shot capture, the flight recorder, fleet capture."""
