"""Changing rows: which route an UPDATE / DELETE / MERGE takes (routes.py), finding the rows it
changes (scan, the driver and bounded routes, the Spark route), deletion-vector bitmaps, the
store-assignment rules every write passes, and writing data and change-data files."""
