"""isolde.repl stage."""
