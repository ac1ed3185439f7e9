"""fuzz stage."""
