"""Modal screens over the dashboard: help and settings."""
