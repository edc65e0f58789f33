"""broker.local_cluster's port choice (the cluster itself runs in tests/cluster)."""

import random

from broker import local_cluster


def test_a_port_given_out_once_is_not_given_out_again_while_still_free(monkeypatch):
    # CI once gave two brokers of one cluster the same port: both were chosen before either bound it.
    draws = iter([24001, 24001, 24002])
    monkeypatch.setattr(random, "randrange", lambda start, stop: next(draws))
    monkeypatch.setattr(local_cluster, "_handed_out", set())
    monkeypatch.setattr(local_cluster, "port_is_free", lambda host, port: True)
    assert [local_cluster.free_port(), local_cluster.free_port()] == [24001, 24002]
