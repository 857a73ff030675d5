"""isolde.executor.jobs stage."""
