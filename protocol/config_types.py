"""The vocabulary of DescribeConfigs / AlterConfigs: value types, sources and resource types.

Pure data. The numbers are the ones that travel on the wire (the `config_type`, `config_source`
and `resource_type` fields of the config APIs), so they must not be renumbered.
"""

from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "ConfigType",
    "ConfigSource",
    "ConfigResourceType",
    "ConfigSynonym",
    "ConfigEntry",
]


class ConfigType(IntEnum):
    """How a config value is typed (DescribeConfigs `config_type`, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where the value in effect comes from (DescribeConfigs `config_source`, v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigResourceType(IntEnum):
    """What a config request is about (the `resource_type` field)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


@dataclass(frozen=True)
class ConfigSynonym:
    """One place a value for a key could come from, as DescribeConfigs lists it.

    `value` is the raw value in that place's own unit (e.g. `log.retention.hours=168` for the
    topic key `retention.ms`); None for sensitive values.
    """

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """What DescribeConfigs reports for one key of one resource.

    `value` is the value in effect, as Kafka prints it (lists comma-joined, None when unset with
    no default or when sensitive). `synonyms` run from the highest precedence down; when any
    exist, the first one is where `value` comes from.
    """

    name: str
    value: str | None
    source: ConfigSource
    type: ConfigType
    documentation: str = ""
    read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
