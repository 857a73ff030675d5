"""isolde.grammar stage."""
