-- isolde quickstart: run with  isolde -f examples/quickstart.sql
-- (or from Python: isolde.connect("./warehouse").run_script("examples/quickstart.sql"))

CREATE DATABASE IF NOT EXISTS shop;
USE shop;

-- A partitioned Delta table; deletion vectors are on by default.
CREATE OR REPLACE TABLE orders (
    id       BIGINT GENERATED ALWAYS AS IDENTITY,
    customer STRING NOT NULL,
    amount   DECIMAL(10, 2),
    day      DATE
) PARTITIONED BY (day)
  COMMENT 'orders, one row per order'
  TBLPROPERTIES ('delta.constraints.positive_amount' = 'amount > 0');

-- Blind appends: identity values are generated, constraints are checked.
INSERT INTO orders (customer, amount, day) VALUES
    ('ann', 12.50, DATE'2024-01-01'),
    ('bob',  3.00, DATE'2024-01-01'),
    ('ann',  7.25, DATE'2024-01-02');
INSERT INTO orders (customer, amount, day) VALUES ('cid', 99.00, DATE'2024-01-03');

-- Queries are plain Spark SQL; every table reference reads one snapshot.
SELECT customer, count(*) AS orders, sum(amount) AS total
FROM orders GROUP BY customer ORDER BY total DESC;

SELECT day, amount, sum(amount) OVER (ORDER BY day, id) AS running_total FROM orders ORDER BY day, id;

-- Data skipping: only the files of one partition are read (see EXPLAIN).
EXPLAIN SELECT * FROM orders WHERE day = DATE'2024-01-02';

-- Replace one day's rows atomically.
INSERT OVERWRITE orders PARTITION (day = DATE'2024-01-01')
    SELECT 'dee', 1.00;

-- Time travel: the table as it was after the first insert.
SELECT count(*) FROM orders VERSION AS OF 1;

-- Row changes: with deletion vectors on, UPDATE/DELETE mark rows instead of rewriting files.
UPDATE orders SET amount = amount + 1 WHERE customer = 'ann';
DELETE FROM orders WHERE amount < 2;

-- Upsert: the planner scopes the MERGE's conflicts to the source's keys.
MERGE INTO orders t
USING (SELECT * FROM VALUES ('ann', 5.00, DATE'2024-01-02'), ('eve', 8.00, DATE'2024-01-04')
       AS s(customer, amount, day)) s
ON t.customer = s.customer AND t.day = s.day
WHEN MATCHED THEN UPDATE SET amount = t.amount + s.amount
WHEN NOT MATCHED THEN INSERT (customer, amount, day) VALUES (s.customer, s.amount, s.day);

SELECT id, customer, amount, day FROM orders ORDER BY day, id;
EXPLAIN DELETE FROM orders WHERE day = DATE'2024-01-04';

-- CTAS into a second table, then a join.
CREATE OR REPLACE TABLE customers AS
    SELECT * FROM VALUES ('ann', 'fr'), ('bob', 'de'), ('cid', 'it'), ('dee', 'fr') AS c(name, country);
SELECT c.country, sum(o.amount) AS total
FROM orders o JOIN customers c ON o.customer = c.name GROUP BY c.country ORDER BY c.country;

-- Compact the small files the statements above left (rows unchanged, dataChange=false).
OPTIMIZE orders;
-- Cluster rows so a range on either column skips files (both columns' ranges interleaved).
OPTIMIZE orders ZORDER BY (customer, amount);

DESCRIBE HISTORY orders LIMIT 5;
SELECT count(*) AS rows_at_v2 FROM orders VERSION AS OF 2;
DESCRIBE DETAIL orders;
SHOW TBLPROPERTIES orders;
SHOW TABLES;
