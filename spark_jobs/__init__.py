"""Spark on logway topics: the "logway" data source and two bulk jobs.

- `register(spark)` makes spark.read / readStream / write .format("logway") available on a
  session (spark_jobs.source; options and schema as Spark's Kafka source).
- `python -m spark_jobs.export`: topic partitions to Parquet, resumable, exactly once per offset.
- `python -m spark_jobs.bulk_load`: Parquet/JSON/CSV files into a topic, counts verified.

Modules: options (option parsing), planning (offset ranges), rows (records to rows), online
(librdkafka reads), offline (segment files), reading (what the source and export share),
writer (producing), source (the data source), export, bulk_load, session (local sessions).
Needs the `spark` extra: pyspark >= 4, pyarrow, pandas, confluent-kafka.
"""

FORMAT = "logway"


def register(spark) -> None:
    """Register the "logway" data source on `spark` (a SparkSession)."""
    from spark_jobs.source import LogwayDataSource

    spark.dataSource.register(LogwayDataSource)
