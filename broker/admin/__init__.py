"""`logway-admin`: an operator's command line over the Kafka wire protocol, mirroring Kafka's
kafka-*.sh tools (flags, output columns, exit status) so that a Kafka operator's habits carry
over. It works against any broker that speaks the protocol, Kafka's own included.

    logway-admin topics --bootstrap-server 127.0.0.1:9092 --describe --topic orders
    logway-admin groups --bootstrap-server 127.0.0.1:9092 --command-config admin.properties --describe --group billing
    logway-admin dump-log --files /var/lib/logway/orders-0/00000000000000000000.log --print-data-log

One module per subcommand family (topics, configs, groups, ...), each with `add_arguments(parser)`
and `async run(args, admin)`; `connection` holds the client (bootstrap, ApiVersions negotiation,
routing to the controller, a group's coordinator or a partition's leader) over
replication.broker_client's BrokerClient, `command_config` turns a client properties file into
its TLS context and SASL login, `cli` is the entry point. `dump_log` is offline: it reads
segment and index files with storage/ and protocol/ readers.
"""
