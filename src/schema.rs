//! The install DDL lives in `sql/schema.sql`, one source for types, tables and indexes; it runs
//! before every generated function, which all refer to its objects by qualified name.
use pgrx::prelude::*;

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
