"""One module per Kafka API. Importing this package registers every handler in HANDLERS."""

from broker.handlers import (  # noqa: F401  (imported to register)
    api_versions,
    create_topics,
    fetch,
    list_offsets,
    metadata,
    produce,
)
from broker.handlers.registry import HANDLERS

__all__ = ["HANDLERS"]
