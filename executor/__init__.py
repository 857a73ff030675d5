"""isolde.executor: a statement plan -> PySpark jobs -> one transactional commit.

Rooms, in the order a statement passes through them (docs/ARCHITECTURE.md walks one UPDATE):

    session/   isolde.connect's Session: parse, plan, dispatch, errors translated, results
    catalog/   names to tables and snapshots: warehouse, views, properties, schemas, binding
    jobs/      one module per statement kind (update.py, merge.py, optimize.py, ...)
    rows/      changing rows: the route table (routes.py), finding rows, deletion vectors,
               store assignment, data and change-data files
    txn/       the optimistic transaction and its conflict checker (no Spark)
    log/       the Delta log: actions, snapshots, checkpoints, stores (never imports Spark)
    runtime/   Spark start-up, warm-up, JVM look-ups, phase timing
    streaming/ the streaming source and sink
"""
