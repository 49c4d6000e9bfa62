"""Every setting the code reads from the environment is documented: each name the service,
the edge, the scripts and the device agent read (``os.environ.get("X")``, ``os.getenv``,
``environ["X"]``, the config readers' ``_int(env, "X", …)``) appears in
docs/CONFIGURATION.md (or, for the device agent, agent/README.md). The docstrings of the
config modules point there instead of keeping tables of their own."""

import ast
import os
import re
import subprocess

from stacks.paths import PROJECT_DIR

NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
# Read from the environment but defined by others: AWS's SDK, LocalStack's client.
STANDARD = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "LOCALSTACK_HOST",
    "PATH",
    "HOME",
}
DOCS = {"": ["docs/CONFIGURATION.md"], "agent/": ["agent/README.md"]}


def _env_names(source: str):
    for node in ast.walk(ast.parse(source)):
        arg = None
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            base = ast.unparse(fn.value) if isinstance(fn, ast.Attribute) else ""
            if (
                name in ("get", "pop", "setdefault")
                and ("environ" in base or base in ("env", "e"))
                and node.args
            ):
                arg = node.args[0]
            elif name == "getenv" and node.args:
                arg = node.args[0]
            elif (
                name.startswith("_")
                and len(node.args) >= 2
                and ast.unparse(node.args[0]) in ("env", "environ", "os.environ")
            ):
                arg = node.args[1]
        elif isinstance(node, ast.Subscript) and "environ" in ast.unparse(node.value):
            arg = node.slice
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and NAME.match(arg.value):
            yield arg.value


def _sources():
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "*.py"], cwd=PROJECT_DIR, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for path in listed:
        if path == "app.py" or path.startswith(
            ("chalicelib/", "edge/", "scripts/", "agent/tunnel_agent/")
        ):
            yield path


def test_every_setting_read_is_documented():
    docs = {}
    for prefix, paths in DOCS.items():
        docs[prefix] = "".join(open(os.path.join(PROJECT_DIR, p)).read() for p in paths)
    missing = {}
    for path in _sources():
        with open(os.path.join(PROJECT_DIR, path)) as handle:
            names = set(_env_names(handle.read())) - STANDARD
        text = docs["agent/"] if path.startswith("agent/") else docs[""]
        for name in names:
            if f"`{name}`" not in text and not re.search(rf"\b{name}\b", text):
                missing.setdefault(name, []).append(path)
    assert not missing, f"settings read but not documented: {missing}"


def test_the_scanner_finds_the_ways_settings_are_read():
    found = set(
        _env_names(
            'import os\nos.environ.get("A_ONE")\nos.getenv("A_TWO")\n'
            'os.environ["A_THREE"]\n_int(env, "A_FOUR", 5)\n'
            'env.get("A_FIVE")\nos.environ.setdefault("A_SIX", "x")\n'
            'print("NOT_A_SETTING")\n'
        )
    )
    assert found == {"A_ONE", "A_TWO", "A_THREE", "A_FOUR", "A_FIVE", "A_SIX"}
