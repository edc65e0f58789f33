"""A SparkSession for the jobs, whether started by spark-submit or as `python -m spark_jobs.X`.

Under spark-submit the session takes spark-submit's master and settings. Run with plain Python,
the session is local (local[*], or --master), its Python workers run this interpreter (so they
import logway from the same environment), and a local session binds to loopback unless
SPARK_LOCAL_IP says otherwise. Nothing is downloaded: the jobs need no Spark packages.
"""

import os
import sys


def get_session(app_name: str, master: str | None = None, settings: dict | None = None):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # set by spark-submit for the Python app
    if master or not submitted:
        master = master or "local[*]"
        builder = builder.master(master)
    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        builder = builder.config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from spark_jobs import register

    register(spark)
    return spark
