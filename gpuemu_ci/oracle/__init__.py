"""oracle stage."""
