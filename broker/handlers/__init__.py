"""One module per Kafka API. Importing this package registers every handler in HANDLERS."""

from broker.handlers import (  # noqa: F401  (imported to register)
    alter_configs,
    alter_partition_reassignments,
    api_versions,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    sync_group,
    update_metadata,
)
from broker.handlers.registry import HANDLERS

__all__ = ["HANDLERS"]
