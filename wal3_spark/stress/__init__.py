"""The end-to-end verification stress test of Chroma's wal3 design ("End-to-End Verification
Stress Test", "Verification"), run by `wal3 stress` (docs/stress.md).

Several logical streams are multiplexed onto one log (`streams`); writer processes append
through the public API at changing throughput and journal what the API answered (`writer`,
`journal`); reader processes read the log in order, regenerate every message from its stream's
seed and check a 1:1 mapping of acknowledged appends to records (`reader`, `ledger`), holding
cursors while garbage collectors run (`collector`); every process injects store faults
(`fault_store`), and the `supervisor` kills processes with SIGKILL, restarts SeaweedFS
(`wal3_spark.testing.seaweedfs`) and
prints a summary (`summary`). Processes share a run directory (`rundir`) and run as
`python -m wal3_spark.stress.worker`.
"""
