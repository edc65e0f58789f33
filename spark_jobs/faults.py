"""Failures a job or a write can be asked to stage, to test that retries and reruns neither lose
nor duplicate records (export's --inject-failure, the writer's injectFailureAfterRows)."""


class InjectedFailure(RuntimeError):
    """A failure staged on request."""


def task_attempt() -> int:
    """The running Spark task's attempt number (0 for the first; 0 outside Spark)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0
