"""Names to tables: the warehouse folders, views, leases on names being created, table
properties and features, schemas and their Spark types, and the binder that gives every table
reference in a statement the snapshot it names."""
