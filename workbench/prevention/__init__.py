"""What a postmortem leaves behind: alert rules and their replay, isolation, baselines, drills."""
