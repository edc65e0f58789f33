"""One module per Kafka API. Importing this package registers every handler in HANDLERS."""

from broker.handlers import (  # noqa: F401  (imported to register)
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from broker.handlers.registry import HANDLERS

__all__ = ["HANDLERS"]
