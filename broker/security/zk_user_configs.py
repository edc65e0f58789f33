"""Cluster mode: users' configs in ZooKeeper, written as Kafka's AdminZkClient.changeConfigs
writes them, so every broker (and Kafka's own tools) read the same credentials.

/config/users/<sanitized user> holds {"version":1,"config":{...}}, shared with client quotas
(broker/security/quota_store.py): each writes its own keys by compare-and-set. After a write, a
sequential /config/changes/config_change_ notification {"version":2,"entity_path":"users/
<sanitized user>"} tells every broker to re-read that user (broker/cluster.py follows them).
"""

import json

from replication import znodes
from replication.zk import BadVersionError, NodeExistsError, NoNodeError, ZkClient, ZkError

from broker.security.scram_store import merge_scram

_CAS_ATTEMPTS = 10


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

    async def write(self, user: str, credentials: dict[str, str]) -> dict[str, str]:
        """Compare-and-set the user's node, so keys written meanwhile by others (client quotas)
        are kept; then the change notification."""
        sanitized = znodes.sanitize(user)
        path = znodes.user_config_path(sanitized)
        for _ in range(_CAS_ATTEMPTS):
            found = await self._zk.get_or_none(path)
            config = merge_scram(znodes.decode_topic_config(found[0]) if found else {}, credentials)
            data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
            try:
                if found is None:
                    await self._zk.create(path, data, makepath=True)
                else:
                    await self._zk.set(path, data, found[1].version)
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
        else:
            raise ZkError(f"/config/users/{sanitized} kept changing; try again")
        await self._zk.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_user_config_change(sanitized),
            sequence=True,
        )
        return config
