"""converter package."""
