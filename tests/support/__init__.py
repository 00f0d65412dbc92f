"""Test fixtures shared by the whole suite (real SeaweedFS, real Spark)."""
