"""broker.local_cluster's port choice and brokers' commands (the cluster itself runs in
tests/cluster)."""

import random
import sys
from pathlib import Path

import pytest

from broker import local_cluster


@pytest.fixture
def ports(monkeypatch):
    """free_port with a fresh memory and range, every port free."""
    monkeypatch.setattr(local_cluster, "_handed_out", set())
    monkeypatch.setattr(local_cluster, "_ports", local_cluster._ports)
    monkeypatch.setattr(local_cluster, "port_is_free", lambda host, port: True)
    return local_cluster


def test_a_port_given_out_once_is_not_given_out_again_while_still_free(ports, monkeypatch):
    # CI once gave two brokers of one cluster the same port: both were chosen before either bound it.
    draws = iter([24001, 24001, 24002])
    monkeypatch.setattr(random, "choice", lambda population: next(draws))
    assert [ports.free_port(), ports.free_port()] == [24001, 24002]


def test_processes_drawing_from_different_slices_never_choose_the_same_port(ports):
    # CI once gave brokers started by the two pytest-xdist workers the same port.
    chosen = []
    for index in range(2):
        ports.draw_ports_from_slice(index, 2)
        chosen.append({ports.free_port() for _ in range(300)})
    assert not chosen[0] & chosen[1]
    assert max(chosen[0]) < min(chosen[1])
    assert all(20000 <= port < 32768 for port in chosen[0] | chosen[1])


def test_a_slice_outside_the_count_is_refused(ports):
    with pytest.raises(ValueError):
        ports.draw_ports_from_slice(2, 2)


def test_a_loopback_cluster_starts_its_brokers_with_the_process_class_given():
    """The benchmarks' cluster-scale part runs its brokers on LOGWAY_BROKER_PACKAGES as the
    suite does; it ran them in pure Python whatever build it was asked to measure."""

    class OtherPython(local_cluster.BrokerServer):
        def command(self) -> list[str]:
            return ["other-python", *super().command()[1:]]

    default = local_cluster.LocalCluster.on_loopback(Path("/unused"), brokers=2)
    assert [b.command()[0] for b in default.brokers.values()] == [sys.executable] * 2
    other = local_cluster.LocalCluster.on_loopback(Path("/unused"), brokers=2, server=OtherPython)
    assert [b.command()[:3] for b in other.brokers.values()] == [["other-python", "-m", "broker"]] * 2
