"""The run folder's owner and its servants: the run directory, checkpoints, summaries,
progress.csv, event-file reading, atomic writes, trial keys, and finding files by name (a
user's folder never read as a pattern). Nothing here knows an agent or the update pipeline."""
