"""globelog's data pipeline on Spark (PySpark's Python data source API): the `globelog` data
source and sink, and the archive, retention and report jobs. docs/spark.md."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Makes `format("globelog")` available in this SparkSession."""
    from pipeline.source import GlobelogDataSource

    spark.dataSource.register(GlobelogDataSource)
