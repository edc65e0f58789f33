"""broker/systemd.py: sd_notify's datagram to NOTIFY_SOCKET."""

import socket

from broker import systemd


def test_a_state_goes_to_the_notify_socket(tmp_path, monkeypatch):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(path)
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert systemd.notify("READY=1")
        assert listener.recv(100) == b"READY=1"


def test_an_abstract_socket_name_is_used_as_one(monkeypatch):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0logway-test-notify")
        monkeypatch.setenv("NOTIFY_SOCKET", "@logway-test-notify")
        assert systemd.notify("STOPPING=1")
        assert listener.recv(100) == b"STOPPING=1"


def test_nothing_is_sent_without_systemd_and_a_dead_socket_is_not_fatal(tmp_path, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not systemd.notify("READY=1")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert not systemd.notify("READY=1")


def test_the_shipped_unit_waits_for_readiness_and_runs_a_command_line_logway_accepts():
    import configparser
    import shlex

    from broker.cli import parse_args
    from tests.harness import REPO

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(REPO / "config" / "logway.service")
    assert unit["Service"]["Type"] == "notify"
    program, *arguments = shlex.split(unit["Service"]["ExecStart"])
    assert program.endswith("/logway")
    assert parse_args(arguments).log_config == "/etc/logway/logging.json"
