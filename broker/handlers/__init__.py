"""One module per Kafka API. Importing this package registers every handler in HANDLERS."""

from broker.handlers import (  # noqa: F401  (imported to register)
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    fetch,
    incremental_alter_configs,
    list_offsets,
    metadata,
    produce,
)
from broker.handlers.registry import HANDLERS

__all__ = ["HANDLERS"]
