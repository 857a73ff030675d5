"""isolde.planner stage."""
