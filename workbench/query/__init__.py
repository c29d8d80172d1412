"""What every reader (CLI, cockpit, report) asks of a bundle: events, samples, raw lines."""
