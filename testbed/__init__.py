"""Real services started on 127.0.0.1 for the tests and the benchmarks: a SeaweedFS S3 server and a Spark standalone
cluster. Neither the server nor its Spark tasks import it."""
