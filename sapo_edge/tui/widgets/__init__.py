"""The dashboard's panels, one small widget per file."""
