"""The edge image's environment, built as the image builds it: a clean virtualenv with exactly
the requirement files edge/Dockerfile installs, and only the folders it copies (chalicelib/,
edge/). `python -m edge` from there serves an official SDK agent against the stack's store.
The packaging test's twin: a module the edge needs but the image lacks fails here."""

import glob
import os
import re
import shutil
import subprocess
import venv

import pytest

from stacks.paths import PROJECT_DIR
from tests.edge.test_edge_sdk import _bound, _credential, _host

DOCKERFILE = os.path.join(PROJECT_DIR, "edge", "Dockerfile")


def _image_plan():
    """(requirement files, copied folders, whether the core's wheel is installed) as the
    Dockerfile names them."""
    whole = open(DOCKERFILE).read()
    text = whole.rsplit("\nFROM ", 1)[1]  # the image's own stage (the first builds the core)
    install = re.search(r"RUN pip install ((?:-r \S+\s*)+)", text)
    assert install, "edge/Dockerfile no longer installs requirement files with pip -r"
    files = re.findall(r"-r (\S+)", install.group(1))
    copied = re.findall(r"^COPY (\w+) \./\1$", text, re.M)
    core = bool(
        re.search(r"^COPY edge_core \./edge_core$", whole, re.M)
        and re.search(r"maturin build --release --manifest-path edge_core/Cargo.toml", whole)
        and re.search(r"\blibssl-dev\b", whole.split("\nFROM ")[1])  # the core stage: OpenSSL
        and re.search(r"^RUN pip install /wheels/edge_core-\*\.whl", text, re.M)
    )
    return files, copied, core


def _core_wheel() -> str:
    """The wheel `make install` built from edge_core/ (the image's first stage builds the same
    sources the same way)."""
    found = glob.glob(os.path.join(PROJECT_DIR, "edge_core", "target", "wheels", "*.whl"))
    assert len(found) == 1, f"expected the one wheel make install builds, found {found}"
    return found[0]


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory):
    files, copied, core = _image_plan()
    assert core, "edge/Dockerfile no longer builds and installs the compiled core"
    root = tmp_path_factory.mktemp("edge-image")
    app = root / "app"
    app.mkdir()
    for folder in copied:
        shutil.copytree(
            os.path.join(PROJECT_DIR, folder),
            app / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests"),
        )
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    args = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for name in files:
        args += ["-r", os.path.join(PROJECT_DIR, name)]
    args.append(_core_wheel())
    done = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return python, str(app), copied


def test_the_image_copies_the_core_and_the_edge_and_installs_no_chalice(image_tree):
    python, app, copied = image_tree
    assert set(copied) == {"chalicelib", "edge"}
    found = subprocess.run([python, "-c", "import chalice"], capture_output=True, text=True)
    assert found.returncode != 0 and "No module named 'chalice'" in found.stderr


def test_the_edge_from_the_image_environment_serves_an_sdk_agent(
    image_tree, another_edge, account, agents
):
    python, app, _ = image_tree
    alone = another_edge(python=python, cwd=app)
    try:
        agent = agents(alone, _credential(account)["token"], [{"proto": "http"}])
        url = _bound(agent.start())[0]["url"]
        resp = alone.http("GET", _host(url), "/echo")
        assert resp.status_code == 200, alone.log()
    finally:
        alone.stop()
    assert "Traceback" not in alone.log()
