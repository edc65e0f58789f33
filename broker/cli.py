"""`logway` and `python -m broker`: run one broker.

    logway --config config/server.properties [--override key=value ...]
           [--log-level INFO] [--log-file FILE | --log-dir DIR] [--log-file-max-bytes N]
           [--log-file-backups N]
           [--log-format text|json] [--log-config logging.json]

Without zookeeper.connect the broker runs standalone: its own controller, with topic metadata
kept in its log dirs.
"""

import argparse
import asyncio
import logging
import sys

from broker import logging_setup
from broker.cluster import ClusterStartError
from broker.config import BrokerConfig, ConfigError
from broker.meta_properties import BrokerMetadataError
from broker.server import serve
from storage.errors import KafkaStorageError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="logway", description="A Kafka-compatible broker.")
    parser.add_argument("--config", help="a server.properties file (Kafka's key names)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key, over the file's value (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", help="TRACE, DEBUG, INFO, WARN, ERROR or FATAL")
    destination = parser.add_mutually_exclusive_group()
    destination.add_argument("--log-file", help="log to this file, rotated by size, instead of stderr")
    destination.add_argument(
        "--log-dir", help="log to server.log, and the request log to kafka-request.log, in this directory (Kafka's LOG_DIR)"
    )
    parser.add_argument(
        "--log-file-max-bytes", type=int, default=logging_setup.DEFAULT_MAX_BYTES,
        help="size at which --log-file is rotated (0: never)",
    )
    parser.add_argument(
        "--log-file-backups", type=int, default=logging_setup.DEFAULT_BACKUPS,
        help="rotated files of --log-file kept (FILE.1, FILE.2 ...)",
    )
    parser.add_argument("--log-format", choices=("text", "json"), default="text", help="one JSON object per line with json")
    parser.add_argument(
        "--log-config",
        help="a Python logging configuration (dictConfig JSON, or fileConfig INI) that replaces "
        "the other --log-* flags, as Kafka's log4j.properties",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        logging_setup.configure(
            args.log_level,
            config_file=args.log_config,
            log_file=args.log_file,
            log_dir=args.log_dir,
            max_bytes=args.log_file_max_bytes,
            backups=args.log_file_backups,
            json_format=args.log_format == "json",
        )
    except logging_setup.LoggingSetupError as exc:
        print(f"logway: {exc}", file=sys.stderr)
        return 2
    try:
        config = BrokerConfig.load(args.config, args.override)
    except (ConfigError, OSError) as exc:
        print(f"logway: {exc}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    try:
        run(serve(config))
    except (KafkaStorageError, OSError, ClusterStartError, BrokerMetadataError, ConfigError) as exc:
        # What escapes here stopped the start: no log dir could take the cluster metadata or the
        # logs, the listener could not bind, a keystore or truststore could not be loaded, the
        # cluster refused this broker, or its log dirs belong to another broker id. Say it plainly.
        logging.getLogger("broker").error("cannot start: %s", exc)
        print(f"logway: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
