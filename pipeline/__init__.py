"""globelog's data pipeline on Spark (PySpark's Python data source API): the `globelog` data
source and sink, and the archive, retention and report jobs. docs/spark.md."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Makes `format("globelog")` available in this SparkSession."""
    from pipeline.source import GlobelogDataSource

    spark.dataSource.register(GlobelogDataSource)


def spark_session(app: str, master: str | None = None) -> Any:
    """The SparkSession a globelog job runs in, with the data source registered.

    Under spark-submit the master comes from it; otherwise `master` (default local[*]). A
    local master binds loopback only, as globelog's local clusters do.
    """
    import os
    import sys

    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    if master is None or master.startswith("local"):  # before the JVM starts
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = SparkConf().get("spark.master", None)
    master = master or submitted or "local[*]"
    builder = (
        SparkSession.builder.appName(app)
        .master(master)
        .config("spark.ui.showConsoleProgress", "false")  # globelog's jobs print their own
    )
    if master.startswith("local"):
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    register(session)
    return session
