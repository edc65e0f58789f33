"""What the jobs' command lines share: KEY=VALUE settings and the run of one job with its exit
status (0 when the job's summary says it succeeded, 1 when it did not or the job failed in a way
it names, 2 for bad arguments, told before Spark starts where the arguments allow)."""

import logging
import sys
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from spark_jobs.options import OptionError


class Summary(Protocol):
    def report(self) -> str: ...


Config = TypeVar("Config")
S = TypeVar("S", bound=Summary)


def key_values(items: Iterable[str], flag: str) -> dict[str, str]:
    """The settings given as repeated `flag KEY=VALUE` arguments."""
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise OptionError(f"{flag} takes KEY=VALUE, not {item!r}")
        settings[key] = value
    return settings


def run_job(
    job: str,
    master: str | None,
    configure: Callable[[], Config],
    run: Callable[[object, Config], S],
    succeeded: Callable[[S], bool],
    failures: tuple[type[Exception], ...] = (),
) -> int:
    """Configure the job (OptionError: exit 2), run it in a Spark session (OptionError: 2; one of
    `failures`: 1), print its summary and exit by `succeeded`."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = configure()
    except OptionError as exc:
        return _fail(job, exc, 2)
    from spark_jobs.session import get_session

    spark = get_session(f"logway {job}", master)
    try:
        summary = run(spark, config)
    except OptionError as exc:
        return _fail(job, exc, 2)
    except failures as exc:
        return _fail(job, exc, 1)
    finally:
        spark.stop()
    print(summary.report())
    return 0 if succeeded(summary) else 1


def _fail(job: str, exc: Exception, status: int) -> int:
    print(f"{job}: {exc}", file=sys.stderr)
    return status
