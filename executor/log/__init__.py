"""The Delta log: actions, snapshots, checkpoints and the log store. Never imports Spark."""
