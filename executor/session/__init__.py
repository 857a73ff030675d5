"""The session: ``isolde.connect``'s Session, the statement context (settings, cancellation,
snapshots pinned per statement), results, the DataFrame reader/writer spellings, table functions."""
