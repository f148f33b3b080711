"""Code that runs both on the driver and inside Spark tasks: the table model, types and conversion, storage, batch
files, change files, the records formats and the on-disk layout. It imports no driver or task code."""
