"""`make mutate`: mutation testing (mutmut) of the modules that hold the documented rules.

Runs in a scratch copy of the project (build/mutate/, so the work tree is never touched),
mutates the functions named in SCOPE, runs the fast tests that cover each mutant (unit tests
and the in-process rule suites listed in tests/mutation/setup.cfg; never the HTTP suites),
then prints killed / total per module and every surviving mutant as a diff.

Module-level constants (``MAX_X = 10``) are not mutated by mutmut (it mutates functions);
the boundary tests (tests/unit/test_documented_limits.py) write the documented numbers out,
so a changed constant fails them instead.

    make mutate                      # the whole SCOPE
    make mutate MUTATE='chalicelib.acl.*'   # some of it (mutmut's glob over mutant names)
"""
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict

PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(PROJECT, "build", "mutate")
MUTMUT = os.path.join(os.path.dirname(sys.executable), "mutmut")

# mutant-name globs: whole rule modules, and the rule checks of the others
SCOPE = [
    "chalicelib.validation.*", "chalicelib.acl.*", "chalicelib.hostnames.*",
    "chalicelib.http_headers.*", "chalicelib.traffic_policy.*", "chalicelib.ids.*",
    "chalicelib.errors.*",
    "chalicelib.store.x_retrying*",
    "chalicelib.web.x__check_request*", "chalicelib.web.x_list_params*",
    "chalicelib.web.x_page*", "chalicelib.web.x_json_object*",
    "chalicelib.edge_modules.x_check_hostport*", "chalicelib.edge_modules.x__check_*",
    "chalicelib.edge_modules.x_parse_module*",
    "chalicelib.reserved_domains.x__check_*",
    "chalicelib.http_response_backends.x__status*",
    "chalicelib.http_response_backends.x__headers*",
    "chalicelib.bot_users.x__check_name*",
    "chalicelib.ip_policies.x_check_cidr*", "chalicelib.ip_policies.x__check_action*",
    "chalicelib.https_edges.x__patterns*", "chalicelib.https_edges.x__match_type*",
    "chalicelib.abuse_reports.x_url_host*", "chalicelib.abuse_reports.x__check_urls*",
]
COPY = ["app.py", "chalicelib", "tests", ".chalice", "pytest.ini"]


def prepare() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    for name in COPY:
        source = os.path.join(PROJECT, name)
        target = os.path.join(WORK, name)
        if os.path.isdir(source):
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(
                "__pycache__", "deployments", "deployed", "venv"))
        else:
            shutil.copy(source, target)
    shutil.copy(os.path.join(PROJECT, "tests", "mutation", "setup.cfg"),
                os.path.join(WORK, "setup.cfg"))


def module_of(mutant: str) -> str:
    return re.sub(r"\.x[_ǁ].*$", "", mutant)


def main() -> int:
    scope = os.environ.get("MUTATE", "").split() or SCOPE
    children = os.environ.get("MUTATE_CHILDREN", "2")
    prepare()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([MUTMUT, "run", "--max-children", children, *scope], cwd=WORK,
                         env=env, stdout=subprocess.DEVNULL)
    results = subprocess.run([MUTMUT, "results", "--all", "true"], cwd=WORK, env=env,
                             capture_output=True, text=True).stdout
    counts = defaultdict(lambda: defaultdict(int))
    survivors = []
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name or status == "not checked":
            continue
        counts[module_of(name)][status] += 1
        if status != "killed":
            survivors.append((name, status))
    print("\nmodule                                   killed / total")
    all_killed = all_total = 0
    for module in sorted(counts):
        total = sum(counts[module].values())
        killed = counts[module]["killed"]
        all_killed, all_total = all_killed + killed, all_total + total
        print(f"{module:40} {killed:4} / {total:<4} {100 * killed / total:5.1f}%")
    if all_total:
        print(f"{'all':40} {all_killed:4} / {all_total:<4} {100 * all_killed / all_total:5.1f}%")
    print(f"\n{len(survivors)} not killed:")
    for name, status in survivors:
        shown = subprocess.run([MUTMUT, "show", name], cwd=WORK, env=env, capture_output=True,
                               text=True).stdout
        changed = [line for line in shown.splitlines()
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        print(f"  {name} ({status}): " + " | ".join(c.strip() for c in changed))
    return run.returncode if not all_total else 0


if __name__ == "__main__":
    sys.exit(main())
