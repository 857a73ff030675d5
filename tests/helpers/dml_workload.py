"""The statement workload the concurrency tests race (threads in test_stress_dml, processes
in test_processes_dml): UPDATE / DELETE / MERGE / INSERT on a table (id, date, v) partitioned
by date, each statement with its effect on a Python model, so a final table can be checked
against a serial replay of the committed statements in log order."""

from __future__ import annotations

import random

import pyarrow as pa

DATES = ["2024-01-01", "2024-01-02", "2024-01-03"]
SCHEMA = pa.schema([("id", pa.int64()), ("date", pa.string()), ("v", pa.int64())])


class Stmt:
    """One generated statement: its SQL and its effect on the model {(id, date): v}."""

    def __init__(self, rng: random.Random, thread: int, seq: int):
        self.kind = rng.choice(["UPD", "UPD", "DEL", "MRG", "MRG", "INS"])
        self.date = rng.choice(DATES)
        self.m = rng.choice([2, 3])
        self.r = rng.randrange(self.m)
        self.k = rng.randrange(1, 9)
        self.x = rng.randrange(20, 60)
        self.ids = sorted(rng.sample(range(0, 14), 2))
        self.new_id = 1000 + thread * 1000 + seq

    def sql(self) -> str:
        d = self.date
        if self.kind == "UPD":
            return f"UPDATE t SET v = v + {self.k} WHERE date = '{d}' AND id % {self.m} = {self.r}"
        if self.kind == "DEL":
            return f"DELETE FROM t WHERE date = '{d}' AND id % {self.m} = {self.r} AND v > {self.x}"
        if self.kind == "MRG":
            values = ", ".join(f"({i}, '{d}', {self.k})" for i in self.ids)
            return (f"MERGE INTO t USING (SELECT * FROM VALUES {values} AS s(id, date, v)) s "
                    f"ON s.id = t.id AND t.date = '{d}' "
                    "WHEN MATCHED THEN UPDATE SET v = t.v + s.v WHEN NOT MATCHED THEN INSERT *")
        return f"INSERT INTO t VALUES ({self.new_id}, '{d}', {self.k})"

    def apply(self, rows: dict) -> None:
        d = self.date
        if self.kind == "UPD":
            for (i, dd), v in list(rows.items()):
                if dd == d and i % self.m == self.r:
                    rows[(i, dd)] = v + self.k
        elif self.kind == "DEL":
            for (i, dd), v in list(rows.items()):
                if dd == d and i % self.m == self.r and v > self.x:
                    del rows[(i, dd)]
        elif self.kind == "MRG":
            for i in self.ids:
                rows[(i, d)] = rows[(i, d)] + self.k if (i, d) in rows else self.k
        else:
            rows[(self.new_id, d)] = self.k


def initial() -> dict:
    return {(i, d): i for i in range(10) for d in DATES}
