"""What the tests share and what they run as scripts or subprocesses: servers on loopback
(S3, GCS, stalled HTTP), tiny datasets and model folders, pins, fault injection, scripts
that start their own Ray cluster (`cluster_script.run_cluster_script`)."""
