-- Queries are handed to sqlglot whole; Query.tables lists every table read.
SELECT * FROM events;
select a, count(*) AS n from db.events e join dim d on e.k = d.k group by a having n > 1 order by n desc limit 10;
SELECT * FROM t VERSION AS OF 3;
SELECT * FROM t TIMESTAMP AS OF '2024-01-01 00:00:00' AS old JOIN t AS cur ON old.id = cur.id;
SELECT * FROM delta.`/data/events` VERSION AS OF 12;
SELECT * FROM t TIMESTAMP AS OF current_timestamp() - INTERVAL 1 DAY;
WITH recent AS (SELECT * FROM events WHERE ts > '2024-01-01') SELECT * FROM recent JOIN users u USING (uid);
SELECT a FROM t1 UNION ALL SELECT a FROM t2 EXCEPT SELECT a FROM t3;
(SELECT 1 AS x) UNION (SELECT 2);
VALUES (1, 'a'), (2, 'b');
FROM events SELECT id, ts;
SELECT id FROM t WHERE id IN (SELECT id FROM s WHERE s.flag) AND note = 'a;b' -- a ; in a comment
;
SELECT /* ; */ `weird;name`, "dq;string", r'raw\', X'1F' FROM `my db`.`tab`
