"""`logway-admin <subcommand> [flags]`: the entry point of the admin command line.

Each subcommand is a module of broker/admin with `add_arguments(parser)` and
`async run(args, admin) -> int`; offline ones (dump-log) have `run_offline(args) -> int`
and no connection. Every networked subcommand takes --bootstrap-server (required) and
--command-config. Exit status: 0 on success, 1 when the operation failed (the message, on
stderr, names Kafka's error), 2 for wrong usage.
"""

import argparse
import asyncio
import importlib
import os
import sys

from broker.admin import command_config
from broker.admin.connection import Admin, AdminError, UsageError
from broker.config import ConfigError

# subcommand -> (module, what it mirrors)
SUBCOMMANDS = {
    "cluster": ("cluster", "cluster id, controller, brokers and API versions (kafka-cluster.sh, kafka-broker-api-versions.sh)"),
    "topics": ("topics", "create, alter, delete, describe and list topics (kafka-topics.sh)"),
    "configs": ("configs", "describe and alter topic, broker, user and client configs (kafka-configs.sh)"),
    "groups": ("groups", "list, describe, reset offsets of and delete consumer groups (kafka-consumer-groups.sh)"),
    "dump-log": ("dump_log", "print and verify log segments and indexes, offline (kafka-dump-log.sh)"),
    "acls": ("acls", "add, remove and list ACLs (kafka-acls.sh)"),
    "producers": ("transactions", "the active producers of partitions (kafka-transactions.sh describe-producers)"),
    "transactions": ("transactions", "list and describe transactions (kafka-transactions.sh)"),
    "elect": ("elect", "preferred or unclean leader election (kafka-leader-election.sh)"),
    "reassign": ("reassign", "generate, execute and verify partition reassignments (kafka-reassign-partitions.sh)"),
    "log-dirs": ("log_dirs", "describe the log dirs of brokers (kafka-log-dirs.sh)"),
    "delete-records": ("delete_records", "delete records up to an offset (kafka-delete-records.sh)"),
    "zk-offsets": ("zk_offsets", "import, export and compare consumer offsets kept in ZooKeeper by old consumers"),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="logway-admin", description="Administer a Kafka-protocol cluster (logway or Kafka)."
    )
    commands = top.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(f"broker.admin.{module_name}")
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if not getattr(module, "OFFLINE", False):
            sub.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT]",
                             help="REQUIRED: the server(s) to connect to")
            sub.add_argument("--command-config", metavar="FILE",
                             help="a client properties file (security.protocol, ssl.*, sasl.*)")
        module.add_arguments(sub, name)
        sub.set_defaults(module=module)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    module = args.module
    try:
        if getattr(module, "OFFLINE", False):
            return module.run_offline(args)
        settings = command_config.load(args.command_config)
        return asyncio.run(_run(module, args, settings))
    except UsageError as exc:
        print(f"logway-admin {args.subcommand}: {exc}", file=sys.stderr)
        return 2
    except (AdminError, ConfigError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (| head): stop quietly, as shell tools do, and keep
        # the interpreter from complaining about the unflushed output at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


async def _run(module, args: argparse.Namespace, settings: command_config.ClientSettings) -> int:
    async with Admin(args.bootstrap_server, settings) as admin:
        return await module.run(args, admin) or 0


if __name__ == "__main__":
    sys.exit(main())
