"""PySpark jobs of the write path: Spark schedules one task per key range (or per file);
inside each task Arrow does the row work and the object-store I/O. No gRPC in here."""
