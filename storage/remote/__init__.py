"""Tiered storage (KIP-405): a tiered log's closed segments copied to a remote store, old offsets
served from there, and the remote log metadata that says what the store holds.

- storage.remote.metadata: the segments' states and Kafka's records of them (__remote_log_metadata)
- storage.remote.storage_manager: the store, over fsspec (Kafka's RemoteStorageManager)
- storage.remote.reader: reads of remote segments through a bounded cache (Kafka's RemoteLogReader)
- storage.remote.manager: copying, expiring, cleaning up and reading (Kafka's RemoteLogManager)

docs/tiered-storage.md describes what works and where logway differs from Kafka.
"""
