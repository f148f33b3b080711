"""The driver process's own plumbing, used by the RPC layer and the write path alike: its Spark session
(spark_session.py), its Prometheus metrics (metrics.py) and its requests' progress (progress.py)."""
