"""The run folder's owner and its servants: the run directory, checkpoints, summaries,
progress.csv, event-file reading, atomic writes and trial keys. Nothing here knows an agent or
the update pipeline."""
