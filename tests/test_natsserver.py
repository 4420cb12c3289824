"""The embedded nats-server (laneledger.devtools.natsserver) and the fixtures on it.

Tests that start the real nats-server themselves, not through the
nats_server fixture (which marks its users), are marked `nats` by hand;
the fake servers below are shell scripts."""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path

import nats
import pytest
from nats.js.api import StreamConfig
from nats_fixtures import jetstream_settings
from polling import eventually, eventually_sync

from laneledger.contract.errors import LedgerUnavailable
from laneledger.devtools.natsserver import (
    ENV_VAR,
    NatsServer,
    NatsServerError,
    find_nats_server,
    nats_server_version,
)

# -- helpers -------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (Linux /proc; [] elsewhere)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def fake_nats_server(path: Path, body: str, version: str = "2.10.0") -> Path:
    """A shell script that answers --version like nats-server and then runs ``body``."""
    path.write_text(
        f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "nats-server: v{version}"; exit 0; fi\n{body}\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def wait_connected(nc: nats.NATS, timeout: float = 10.0) -> None:
    await eventually(lambda: nc.is_connected, what="the client to reconnect", timeout=timeout)


# -- (a) JetStream works on the fixture's server --------------------------------


async def test_stream_accepts_publishes_and_reads_back_in_order(js):
    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"]))

    sent = [(f"orders.{i % 2}", f"payload-{i}".encode(), f"msg-{i}") for i in range(5)]
    for i, (subject, payload, msg_id) in enumerate(sent, start=1):
        ack = await js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id, "X-Index": str(i)})
        assert (ack.stream, ack.seq) == ("ORDERS", i)
        assert not ack.duplicate

    # The same Nats-Msg-Id again is deduplicated: acked with the original
    # sequence, flagged duplicate, not stored a second time.
    again = await js.publish("orders.0", b"other bytes", headers={"Nats-Msg-Id": "msg-2"})
    assert again.duplicate is True
    assert again.seq == 3
    info = await js.stream_info("ORDERS")
    assert (info.state.messages, info.state.last_seq) == (5, 5)

    sub = await js.pull_subscribe("orders.>", durable="reader", stream="ORDERS")
    got = []
    while len(got) < len(sent):
        for msg in await sub.fetch(len(sent) - len(got), timeout=5):
            await msg.ack()
            got.append(msg)

    assert [(m.subject, m.data, m.headers["Nats-Msg-Id"]) for m in got] == sent
    assert [m.headers["X-Index"] for m in got] == ["1", "2", "3", "4", "5"]
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4, 5]
    with pytest.raises(nats.errors.TimeoutError):
        await sub.fetch(1, timeout=0.3)


# -- (b) the port is chosen by the server and read from its log -----------------


def test_port_is_chosen_by_the_server_and_read_from_its_log(nats_server, tmp_path):
    port = nats_server.port
    assert nats_server.url == f"nats://127.0.0.1:{port}"
    assert f"Listening for client connections on 127.0.0.1:{port}" in nats_server.log_text()
    argv = Path(f"/proc/{nats_server.pid}/cmdline").read_bytes().split(b"\0")
    assert b"-p" in argv and argv[argv.index(b"-p") + 1] == b"-1"  # no fixed port

    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        info = sock.recv(4096)
    assert info.startswith(b"INFO ")
    assert f'"port":{port}'.encode() in info
    assert b'"jetstream":true' in info

    with NatsServer(tmp_path / "second") as other:
        assert other.port != port


@pytest.mark.nats
def test_jetstream_fsyncs_every_write(tmp_path):
    with NatsServer(tmp_path / "nats", extra_args=("-m", "-1")) as server:
        settings = jetstream_settings(server)
        assert settings["sync_always"] is True
        assert settings["store_dir"] == str(tmp_path / "nats" / "jetstream")


# -- (c) stop, kill, restart --------------------------------------------------------


@pytest.mark.nats
def test_stop_leaves_no_process_and_is_idempotent(tmp_path):
    server = NatsServer(tmp_path / "nats").start()
    pid = server.pid
    assert pid is not None and alive(pid)
    assert processes_mentioning(str(tmp_path)) == [pid]

    server.stop()
    assert not alive(pid)
    assert server.pid is None and not server.running
    assert processes_mentioning(str(tmp_path)) == []
    assert "Server Exiting" in server.log_text()  # a graceful shutdown
    server.stop()
    server.kill()


@pytest.mark.nats
def test_context_manager_stops_it(tmp_path):
    with NatsServer(tmp_path / "nats") as server:
        pid = server.pid
        assert alive(pid)
    assert not alive(pid)
    assert processes_mentioning(str(tmp_path)) == []


async def test_restart_keeps_store_and_port_and_clients_reconnect(nats_server, nc, js):
    await js.add_stream(name="KEEP", subjects=["keep.>"])
    for i in range(3):
        await js.publish(f"keep.{i}", f"m{i}".encode())
    port, old_pid = nats_server.port, nats_server.pid

    await nats_server.arestart()

    assert nats_server.port == port
    assert nats_server.pid != old_pid and not alive(old_pid)
    assert nats_server.log_text().count("Server is ready") == 2
    await wait_connected(nc)
    info = await js.stream_info("KEEP")
    assert (info.state.messages, info.state.last_seq) == (3, 3)
    ack = await js.publish("keep.3", b"m3")
    assert ack.seq == 4
    sub = await js.pull_subscribe("keep.>", durable="r", stream="KEEP")
    assert [m.data for m in await sub.fetch(4, timeout=5)] == [b"m0", b"m1", b"m2", b"m3"]


async def test_kill_then_restart_on_the_same_port(nats_server, nc, js):
    await js.add_stream(name="CRASH", subjects=["crash"])
    assert (await js.publish("crash", b"before")).seq == 1
    port, old_pid = nats_server.port, nats_server.pid

    nats_server.kill()
    assert not alive(old_pid)
    assert not nats_server.running
    assert "Server Exiting" not in nats_server.log_text()  # no graceful shutdown

    await nats_server.astart()
    assert nats_server.port == port
    await wait_connected(nc)
    info = await js.stream_info("CRASH")
    assert info.state.messages == 1  # acked writes survive a process crash


def test_stop_escalates_to_sigkill_of_the_whole_group(tmp_path):
    # Ignores SIGTERM, and has a child that does too.
    script = fake_nats_server(
        tmp_path / "stubborn",
        "trap '' TERM\n"
        "sleep 60 &\n"
        'echo "child $!"\n'
        'echo "Listening for client connections on 127.0.0.1:1"\n'
        'echo "Server is ready"\n'
        "wait",
    )
    server = NatsServer(tmp_path / "nats", binary=script).start()
    pid = server.pid
    child = int(server.log_text().split("child ")[1].split()[0])
    assert alive(pid) and alive(child)

    server.stop(timeout=0.3)

    assert not alive(pid)
    eventually_sync(lambda: not alive(child), what="the orphaned child to be reaped by init", timeout=2)


# -- (d) clear errors -----------------------------------------------------------------


def test_missing_binary_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-nats-server"
    with pytest.raises(NatsServerError, match="does not exist or is not executable") as err:
        NatsServer(tmp_path / "nats", binary=missing)
    assert str(missing) in str(err.value)
    assert isinstance(err.value, LedgerUnavailable)


def test_env_var_names_the_binary_and_is_not_silently_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(NatsServerError, match=r"\$LANELEDGER_NATS_SERVER"):
        find_nats_server()

    real = find_nats_server(Path(sys.executable).parent / "nats-server")
    monkeypatch.setenv(ENV_VAR, real)
    assert find_nats_server() == real


def test_no_binary_anywhere_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerError, match="no nats-server found"):
        find_nats_server()


def test_binary_beside_the_interpreter_is_found(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "")
    assert find_nats_server() == str(Path(sys.executable).parent / "nats-server")
    assert nats_server_version(find_nats_server()) >= (2, 10, 0)


def test_too_old_nats_server_is_refused(tmp_path):
    old = fake_nats_server(tmp_path / "old-nats-server", "exit 1", version="2.9.25")
    server = NatsServer(tmp_path / "nats", binary=old)
    with pytest.raises(NatsServerError, match=r"2\.9\.25.*2\.10\.0 or newer"):
        server.start()


@pytest.mark.nats
def test_store_dir_that_is_a_file_fails_quoting_the_log(tmp_path):
    store = tmp_path / "store"
    store.write_text("not a directory")
    server = NatsServer(store)
    with pytest.raises(NatsServerError) as err:
        server.start()
    message = str(err.value)
    assert "exited with code 1 before it was ready" in message
    assert str(server.log_path) in message
    assert "storage directory is not a directory" in message
    assert not server.running
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.nats
def test_invalid_flag_fails_quoting_the_log(tmp_path):
    server = NatsServer(tmp_path / "nats", extra_args=["--no-such-flag"])
    with pytest.raises(NatsServerError) as err:
        server.start()
    message = str(err.value)
    assert "before it was ready" in message
    assert "flag provided but not defined: -no-such-flag" in message
    assert str(server.log_path) in message


def test_never_ready_times_out_and_kills_it(tmp_path):
    script = fake_nats_server(tmp_path / "silent", "exec sleep 60")
    server = NatsServer(tmp_path / "nats", binary=script)
    with pytest.raises(NatsServerError, match=r"not ready within 0\.3s"):
        server.start(timeout=0.3)
    assert not server.running
    assert processes_mentioning(str(script)) == []


def test_port_already_in_use_fails_quoting_the_log(nats_server, tmp_path):
    clash = NatsServer(tmp_path / "clash", port=nats_server.port)
    with pytest.raises(NatsServerError, match="address already in use"):
        clash.start()
