"""No client exhausts the broker's descriptors, memory or CPU for the others: a broker process
under the load of many or greedy raw connections keeps answering the rest (issue 14)."""

import os
import socket
import time
from contextlib import ExitStack

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from protocol.api_keys import ApiKey
from tests.harness import BrokerProcess
from tests.kafka_wire import call

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def api_versions(sock: socket.socket) -> int:
    request = ApiVersionsRequest(client_software_name="limits", client_software_version="1")
    return call(sock, ApiKey.API_VERSIONS, 3, request).error_code


def connect(broker: BrokerProcess, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_out_of_descriptors_the_broker_backs_off_and_keeps_serving(tmp_path):
    with BrokerProcess(tmp_path / "data", max_open_files=128) as broker, ExitStack() as idle:
        pid = broker.process.pid
        existing = idle.enter_context(connect(broker))
        assert api_versions(existing) == 0
        spare = 128 - open_descriptors(pid)
        for _ in range(spare + 50):  # the backlog holds the ones the broker cannot accept
            idle.enter_context(connect(broker))
        time.sleep(0.5)
        cpu_before = cpu_seconds(pid)
        time.sleep(3)
        assert cpu_seconds(pid) - cpu_before < 1.0, "the broker spins on a failing accept"
        failures = broker.log().count("accept failed")
        assert 1 <= failures <= 10, broker.log()[-3000:]
        assert api_versions(existing) == 0

        idle.close()  # every idle connection and the existing one: descriptors come back
        deadline = time.monotonic() + 10
        while open_descriptors(pid) > 128 - spare + 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        with connect(broker) as newcomer:
            assert api_versions(newcomer) == 0
