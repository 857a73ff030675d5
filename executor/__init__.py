"""isolde.executor stage."""
