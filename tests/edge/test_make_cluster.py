"""`make cluster` and `make api-key` beside it, as a user runs them: real processes.

`make api-key` reads the store endpoint and secret of the stack running now: `make run`'s
DATA_DIR/store.env or `make cluster`'s DATA_DIR/cluster/stack/store.env, whichever store
answers (scripts/running_store.py). Both files stay after their stack stops, so a stale one
of an earlier `make run` is here too and must not be chosen.
"""

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import requests

from stacks.paths import PROJECT_DIR
from stacks.ports import free_port


@pytest.fixture
def make_cluster(tmp_path):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/install_test_deps.sh)")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    dead = free_port()  # an earlier `make run`'s store, stopped since
    (data_dir / "store.env").write_text(
        f"DYNAMODB_ENDPOINT_URL=http://127.0.0.1:{dead}\nAWS_ACCESS_KEY_ID=stale\n"
        "AWS_SECRET_ACCESS_KEY=stale\nAWS_DEFAULT_REGION=us-east-1\nTABLE_NAME=tunnel-service\n"
    )
    api_port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DYNAMODB_ENDPOINT_URL"}
    log = open(tmp_path / "make-cluster.log", "wb")
    process = subprocess.Popen(
        [
            "make",
            "-s",
            "cluster",
            "N=2",
            f"DATA_DIR={data_dir}",
            f"PORT={api_port}",
            f"EDGE_AGENT_PORT={free_port()}",
            f"EDGE_HTTP_PORT={free_port()}",
            f"EDGE_HTTPS_PORT={free_port()}",
        ],
        cwd=PROJECT_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    info = data_dir / "cluster" / "cluster.json"
    deadline = time.time() + 180
    try:
        while not info.exists():
            assert process.poll() is None, (tmp_path / "make-cluster.log").read_text()
            assert time.time() < deadline, "make cluster did not come up"
            time.sleep(0.2)
        yield data_dir, f"http://127.0.0.1:{api_port}", json.loads(info.read_text())
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_make_api_key_beside_a_running_make_cluster(make_cluster):
    data_dir, api_url, _ = make_cluster
    env = {**os.environ, "TABLE_NAME": "tunnel-service"}
    for name in ("DYNAMODB_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(name, None)
    out = subprocess.run(
        ["make", "-s", "api-key", f"DATA_DIR={data_dir}"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    resp = requests.get(
        api_url + "/api_keys",
        headers={"Authorization": f"Bearer {token}", "Ngrok-Version": "2"},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text


def test_make_api_key_without_a_running_stack_says_so(tmp_path):
    (tmp_path / "store.env").write_text(f"DYNAMODB_ENDPOINT_URL=http://127.0.0.1:{free_port()}\n")
    env = {k: v for k, v in os.environ.items() if k != "DYNAMODB_ENDPOINT_URL"}
    out = subprocess.run(
        ["make", "-s", "api-key", f"DATA_DIR={tmp_path}"],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "no running stack's store" in out.stderr, out.stderr
