"""Cluster mode: users' configs in ZooKeeper, written as Kafka's AdminZkClient.changeConfigs
writes them, so every broker (and Kafka's own tools) read the same credentials.

/config/users/<sanitized user> holds {"version":1,"config":{...}}; after a write a sequential
/config/changes/config_change_ notification {"version":2,"entity_path":"users/<sanitized
user>"} tells every broker to re-read that user (broker/cluster.py follows the notifications).
"""

import json

from replication import znodes
from replication.zk import NodeExistsError, ZkClient


class ZkUserConfigs:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    async def read_all(self) -> dict[str, dict[str, str]]:
        users = {}
        for sanitized in await self._zk.children_or_empty(znodes.CONFIG_USERS):
            config = await self.read(sanitized)
            if config is not None:
                users[znodes.desanitize(sanitized)] = config
        return users

    async def read(self, sanitized_user: str) -> dict[str, str] | None:
        found = await self._zk.get_or_none(znodes.user_config_path(sanitized_user))
        if found is None:
            return None
        return znodes.decode_topic_config(found[0])

    async def write(self, user: str, config: dict[str, str]) -> None:
        sanitized = znodes.sanitize(user)
        path = znodes.user_config_path(sanitized)
        data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
        if await self._zk.exists(path) is None:
            try:
                await self._zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self._zk.set(path, data)
        else:
            await self._zk.set(path, data)
        await self._zk.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_user_config_change(sanitized),
            sequence=True,
        )
