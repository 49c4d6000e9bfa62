"""`make run` killed (kill -9, Ctrl-C) under concurrent writes keeps every acknowledged write,
and a data directory that is damaged or incomplete stops start-up with one clear line."""

import os
import shutil
import signal
import threading
import time

import pytest
import requests

from stacks.api import ApiProcess

HEADERS = {"Service-Version": "2"}


def _auth(token):
    return {**HEADERS, "Authorization": f"Bearer {token}"}


def _token(stack):
    import json

    with open(os.path.join(stack.data_dir, "local-admin.json")) as handle:
        return json.load(handle)["token"]


def _children(pid):
    """The stack's child processes (store, api), read from /proc."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _write_until_stopped(stack, token, acknowledged, stop, writers=8):
    """``writers`` threads create API keys as fast as they can; ids answered 201 are kept."""

    def writer():
        session = requests.Session()
        while not stop.is_set():
            try:
                resp = session.post(
                    stack.base_url + "/api_keys",
                    headers=_auth(token),
                    json={"description": "durable"},
                    timeout=10,
                )
            except requests.RequestException:
                continue  # the stack is going down: not acknowledged
            if resp.status_code == 201:
                acknowledged.append(resp.json()["id"])

    threads = [threading.Thread(target=writer, daemon=True) for _ in range(writers)]
    for thread in threads:
        thread.start()
    return threads


def _listed_ids(stack, token):
    ids, url = set(), stack.base_url + "/api_keys?limit=100"
    while url:
        page = requests.get(url, headers=_auth(token), timeout=30).json()
        ids.update(k["id"] for k in page["keys"])
        url = page["next_page_uri"]
    return ids


def _restart_and_check(tmp_path, token, acknowledged):
    again = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    try:
        listed = _listed_ids(again, token)
        missing = set(acknowledged) - listed
        assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged writes lost"
        assert "bootstrapped" not in again.log()
    finally:
        again.stop()


def test_kill_9_of_the_whole_stack_under_concurrent_writes_loses_no_acknowledged_write(tmp_path):
    for round_ in range(2):  # the second round also replays the first round's log
        stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
        token = _token(stack)
        acknowledged, stop = [], threading.Event()
        threads = _write_until_stopped(stack, token, acknowledged, stop)
        deadline = time.time() + 20
        while len(acknowledged) < 40 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.1 * round_)
        pids = _children(stack.process.pid) + [stack.process.pid]
        for pid in pids:  # every process of the stack at once, mid-traffic
            os.kill(pid, signal.SIGKILL)
        stack.process.wait()
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        assert len(acknowledged) >= 40
        _restart_and_check(tmp_path, token, acknowledged)


def test_kill_9_of_serve_py_alone_takes_its_children_down(tmp_path):
    stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    children = _children(stack.process.pid)
    assert len(children) == 2  # store and api
    os.kill(stack.process.pid, signal.SIGKILL)
    stack.process.wait()
    deadline = time.time() + 5
    while time.time() < deadline and any(
        os.path.exists(f"/proc/{c}/status") and "zombie" not in open(f"/proc/{c}/status").read()
        for c in children
    ):
        time.sleep(0.05)
    alive = [
        c
        for c in children
        if os.path.exists(f"/proc/{c}/status") and "zombie" not in open(f"/proc/{c}/status").read()
    ]
    assert not alive
    again = ApiProcess(data_dir=str(tmp_path), port=stack.port, store_port=stack.store_port).start(
        bootstrap=True
    )  # ports are free
    again.stop()


def test_ctrl_c_under_concurrent_writes_stops_within_10s_and_loses_nothing(tmp_path):
    stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    token = _token(stack)
    acknowledged, stop = [], threading.Event()
    threads = _write_until_stopped(stack, token, acknowledged, stop)
    deadline = time.time() + 20
    while len(acknowledged) < 40 and time.time() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    stack.process.send_signal(signal.SIGINT)
    stack.process.wait(timeout=15)
    took = time.monotonic() - started
    stop.set()
    for thread in threads:
        thread.join(timeout=15)
    assert stack.process.returncode == 0, stack.log()
    assert took < 10, took
    assert not any(os.path.exists(f"/proc/{c}") for c in _children(stack.process.pid))
    _restart_and_check(tmp_path, token, acknowledged)


def _start_fails(tmp_path):
    stack = ApiProcess(data_dir=str(tmp_path))
    try:
        stack.start(bootstrap=True, timeout=60)
    except RuntimeError:
        return [line for line in stack.log().splitlines() if line.startswith("error:")]
    stack.stop()
    raise AssertionError("start-up should have failed: " + stack.log())


@pytest.fixture(scope="module")
def data_template(tmp_path_factory):
    """A data directory with a local account and 3 more keys, made once per module."""
    path = tmp_path_factory.mktemp("template")
    stack = ApiProcess(data_dir=str(path)).start(bootstrap=True)
    token = _token(stack)
    for _ in range(3):
        requests.post(stack.base_url + "/api_keys", headers=_auth(token), json={}, timeout=10)
    stack.stop()
    return path, token


@pytest.fixture
def with_data(data_template, tmp_path):
    """(a copy of the template data directory, its admin token)"""
    source, token = data_template
    target = tmp_path / "data"
    shutil.copytree(source, target)
    (target / "serve.log").unlink()
    return target, token


def test_a_damaged_log_stops_start_up_with_one_line_naming_it(with_data):
    tmp_path, _ = with_data
    log = tmp_path / "store" / "wal-000001.log"
    data = bytearray(log.read_bytes())
    data[20] ^= 0xFF  # a flipped bit in the first record, with good records after it
    log.write_bytes(bytes(data))
    errors = _start_fails(tmp_path)
    assert len(errors) == 1
    assert str(log) in errors[0] and "make reset" in errors[0]


def test_a_missing_store_with_a_key_file_stops_start_up(with_data):
    tmp_path, _ = with_data
    for path in (tmp_path / "store").iterdir():
        path.unlink()
    (tmp_path / "store").rmdir()
    errors = _start_fails(tmp_path)
    assert len(errors) == 1 and "store" in errors[0] and "make reset" in errors[0]


def test_a_missing_snapshot_stops_start_up(with_data):
    tmp_path, _ = with_data
    (tmp_path / "store" / "snapshot-000000.db").unlink()
    errors = _start_fails(tmp_path)
    assert len(errors) == 1 and "snapshot" in errors[0] and "make reset" in errors[0]


def test_a_write_cut_short_at_the_end_of_the_log_is_dropped_and_the_rest_kept(with_data):
    tmp_path, token = with_data
    log = tmp_path / "store" / "wal-000001.log"
    whole = log.read_bytes()
    log.write_bytes(whole + whole[-40:-10])  # a torn copy of a record at the tail
    stack = ApiProcess(data_dir=str(tmp_path)).start(bootstrap=True)
    try:
        assert "cut off a write" in stack.log()
        assert len(_listed_ids(stack, token)) == 4  # bootstrap key + 3
        assert log.read_bytes()[: len(whole)] == whole
    finally:
        stack.stop()


def test_a_key_file_the_store_does_not_know_stops_start_up(with_data):
    tmp_path, _ = with_data
    import json

    path = tmp_path / "local-admin.json"
    data = json.loads(path.read_text())
    data["token"] = "not-a-key-the-store-knows-" + "x" * 20
    path.write_text(json.dumps(data))
    errors = _start_fails(tmp_path)
    assert len(errors) == 1 and str(path) in errors[0]


def test_a_busy_port_stops_start_up_with_one_line(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        stack = ApiProcess(data_dir=str(tmp_path), store_port=sock.getsockname()[1])
        try:
            stack.start(bootstrap=True, timeout=60)
            stack.stop()
            raise AssertionError("start-up should have failed")
        except RuntimeError:
            errors = [line for line in stack.log().splitlines() if line.startswith("error:")]
        assert errors and "STORE_PORT" in errors[0]
