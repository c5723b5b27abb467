"""The swappable parts: each is one gin binding away from being replaced by another."""
