-- OPTIMIZE
OPTIMIZE t;
OPTIMIZE '/data/t';
OPTIMIZE delta.`/data/t` FULL;
OPTIMIZE t WHERE dt >= '2024-01-01' ZORDER BY (a, b);
OPTIMIZE db.t ZORDER BY a, b.c;
OPTIMIZE t FULL WHERE p = 1;
-- REORG
REORG TABLE t APPLY (PURGE);
REORG TABLE t WHERE dt = '2024-01-01' APPLY (PURGE);
REORG TABLE t APPLY (UPGRADE UNIFORM (ICEBERG_COMPAT_VERSION = 2));
-- VACUUM
VACUUM t;
VACUUM '/data/t' RETAIN 168 HOURS;
VACUUM t DRY RUN;
VACUUM t LITE;
VACUUM t FULL RETAIN 0.5 HOURS DRY RUN;
VACUUM delta.`/data/t` DRY RUN RETAIN 24 HOURS LITE;
-- RESTORE
RESTORE t TO VERSION AS OF 3;
RESTORE TABLE db.t TO TIMESTAMP AS OF '2024-01-01';
RESTORE '/data/t' VERSION AS OF 0;
RESTORE TABLE delta.`/data/t` TO TIMESTAMP AS OF date_sub(current_date(), 1);
-- DESCRIBE / SHOW
DESCRIBE HISTORY t;
DESC HISTORY '/data/t' LIMIT 5;
DESCRIBE HISTORY delta.`/data/t` LIMIT 1;
DESCRIBE DETAIL t;
DESCRIBE DETAIL '/data/t';
DESCRIBE t;
DESCRIBE TABLE t;
DESC TABLE EXTENDED db.t;
DESCRIBE EXTENDED t;
SHOW TBLPROPERTIES t;
SHOW TBLPROPERTIES t ('delta.minReaderVersion');
SHOW TBLPROPERTIES t (delta.minWriterVersion);
-- CONVERT
CONVERT TO DELTA parquet.`/data/raw`;
CONVERT TO DELTA parquet.`/data/raw` NO STATISTICS;
CONVERT TO DELTA parquet.`/data/raw` PARTITIONED BY (dt DATE, region STRING);
CONVERT TO DELTA db.parquet_table NO STATISTICS PARTITIONED BY (p INT);
-- SET / RESET
SET spark.databricks.delta.properties.defaults.enableDeletionVectors = false;
SET spark.sql.shuffle.partitions=8;
SET spark.databricks.delta.retentionDurationCheck.enabled = false -- trailing comment
;
SET my.key = some value with spaces;
SET spark.sql.shuffle.partitions;
SET;
RESET;
RESET spark.sql.shuffle.partitions;
-- EXPLAIN
EXPLAIN SELECT * FROM t;
EXPLAIN EXTENDED DELETE FROM t WHERE id = 1;
EXPLAIN FORMATTED MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE;
EXPLAIN CODEGEN OPTIMIZE t;
-- Delta's keywords are still names
SELECT optimize, zorder, full, history, detail, vacuum, retain, dry, run, lite FROM reorg;
OPTIMIZE optimize ZORDER BY (zorder);
VACUUM vacuum RETAIN 1 HOURS;
DESCRIBE HISTORY history;
DESCRIBE history;
DESCRIBE detail;
DESCRIBE extended;
UPDATE full SET history = 1 WHERE detail = 2;
DELETE FROM apply WHERE purge = true;
CREATE TABLE lite (full INT, run STRING, dry BOOLEAN, zorder INT) USING delta;
MERGE INTO history h USING detail d ON h.id = d.id WHEN MATCHED THEN UPDATE SET h.full = d.full;
INSERT INTO restore (retain, hours) VALUES (1, 2);
MSCK REPAIR TABLE sales SYNC METADATA;
REPAIR TABLE delta.`/data/t`
