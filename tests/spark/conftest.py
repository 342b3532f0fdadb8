"""Spark fixtures: one local SparkSession for the whole test session (a cold one takes ~5 s),
with the `globelog` data source registered; the real cluster comes from the session fixture."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline import register


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark binds loopback only
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers import globelog from this venv
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,3]")  # 2 cores; a failed task runs up to 3 times
        .appName("globelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        # rows reach a Python writer in batches of 100 (not 10 000), so a task that fails
        # mid-partition has already written part of it
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .getOrCreate()
    )
    register(session)
    try:
        yield session
    finally:
        session.stop()
