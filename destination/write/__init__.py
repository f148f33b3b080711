"""Driver-side orchestration of every table change: request planning, the Spark session and job runner, DDL,
migrations and the commit of each version (through destination.store)."""
