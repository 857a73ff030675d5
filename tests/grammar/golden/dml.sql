-- INSERT
INSERT INTO t VALUES (1, 'a'), (2, 'b');
INSERT INTO TABLE db.t SELECT * FROM s;
INSERT OVERWRITE t SELECT * FROM s WHERE s.ok;
INSERT OVERWRITE TABLE t PARTITION (dt = '2024-01-01', region) SELECT id, region FROM s;
INSERT INTO t (id, name) VALUES (1, 'x');
INSERT INTO t (id, name) SELECT id, name FROM s;
INSERT INTO t BY NAME SELECT name, id FROM s;
INSERT INTO t (SELECT * FROM s);
INSERT INTO t WITH c AS (SELECT 1 AS id) SELECT * FROM c;
INSERT INTO t REPLACE WHERE dt >= '2024-01-01' AND dt < '2024-02-01' SELECT * FROM s;
INSERT INTO TABLE t REPLACE WHERE id = 1 VALUES (1, 'new');
INSERT INTO delta.`/data/t` SELECT * FROM s VERSION AS OF 2;
-- UPDATE
UPDATE t SET a = 1;
UPDATE db.t AS x SET x.a = x.a + 1, b = 'two', c.d.e = named_struct('f', 1) WHERE x.id IN (1, 2, 3);
UPDATE t u SET status = CASE WHEN u.n > 10 THEN 'big' ELSE 'small' END WHERE u.kind = 'x';
UPDATE delta.`/data/t` SET a = NULL WHERE a = -1;
-- DELETE
DELETE FROM t;
DELETE FROM t WHERE id = 1;
DELETE FROM db.t AS x WHERE x.ts < current_date() - INTERVAL 30 DAYS;
DELETE FROM t x WHERE EXISTS (SELECT 1 FROM s WHERE s.id = x.id);
-- MERGE
MERGE INTO target t
USING source s
ON t.id = s.id
WHEN MATCHED THEN UPDATE SET *
WHEN NOT MATCHED THEN INSERT *;
MERGE WITH SCHEMA EVOLUTION INTO db.target AS t
USING (SELECT id, max(v) AS v FROM updates GROUP BY id) AS s
ON t.id = s.id AND t.region = 'eu'
WHEN MATCHED AND s.v IS NULL THEN DELETE
WHEN MATCHED AND s.v > t.v THEN UPDATE SET t.v = s.v, t.updated = current_timestamp()
WHEN MATCHED THEN UPDATE SET t.seen = t.seen + 1
WHEN NOT MATCHED BY TARGET AND s.v > 0 THEN INSERT (id, v, region) VALUES (s.id, s.v, 'eu')
WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, coalesce(s.v, 0))
WHEN NOT MATCHED BY SOURCE AND t.updated < '2020-01-01' THEN DELETE
WHEN NOT MATCHED BY SOURCE THEN UPDATE SET t.active = false;
MERGE INTO t USING s VERSION AS OF 4 ON t.k = s.k WHEN MATCHED THEN UPDATE SET t.v = CASE WHEN s.v > 1 THEN s.v ELSE 0 END;
MERGE INTO delta.`/data/t` USING delta.`/data/s` TIMESTAMP AS OF '2024-05-01' AS src ON delta.`/data/t`.k = src.k WHEN MATCHED THEN DELETE;

-- multi-statement transactions
BEGIN;
BEGIN TRANSACTION;
UPDATE accounts SET balance = balance - 10 WHERE id = 1;
COMMIT;
ROLLBACK WORK;
BEGIN ATOMIC
  UPDATE accounts SET balance = balance - 10 WHERE id = 1;
  INSERT INTO audit VALUES (1, 'debit');
END;
