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
    MUTATE_REPORT_ONLY=1 make mutate        # print the last run's figures again

Survivors that change only message text (a string literal, or a message replaced by None) are
counted apart and not listed: the contract fixes error_code, status and details, not msg wording.
"""
import difflib
import fnmatch
import glob
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
COPY = ["app.py", "chalicelib", "tests", "scripts", ".chalice", "pytest.ini"]


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


_STRING = re.compile(r"""[rbfuRBFU]{0,2}("([^"\\]|\\.)*"|'([^'\\]|\\.)*')""")


def _message_only(diff: list) -> bool:
    """True when the mutant changes nothing but message text: a string literal's content, or a
    message argument replaced by None (the contract fixes error_code, status and
    details.field, not the wording of msg)."""
    def norm(line: str) -> str:
        line = _STRING.sub("S", line)
        return re.sub(r"\bstr\((exc|None)\)", "S", line).replace("None", "S")
    minus = [norm(line[1:]) for line in diff if line.startswith("-")]
    plus = [norm(line[1:]) for line in diff if line.startswith("+")]
    return minus == plus


def diffs() -> dict:
    """mutant name -> the changed lines against the original function (from mutants/)."""
    functions = {}
    for path in glob.glob(os.path.join(WORK, "mutants", "chalicelib", "*.py")):
        module = "chalicelib." + os.path.basename(path)[:-3]
        with open(path) as handle:
            source = handle.read()
        for match in re.finditer(r"^def (x\S*?__mutmut_(?:orig|\d+))\(.*?(?=^\S)", source,
                                 re.S | re.M):
            functions[f"{module}.{match.group(1)}"] = match.group(0).splitlines()[1:]
    result = {}
    for name, lines in functions.items():
        if name.endswith("__mutmut_orig"):
            continue
        original = functions.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", name), [])
        result[name] = [line.strip() for line in difflib.unified_diff(original, lines, lineterm="", n=0)
                        if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    return result


def main() -> int:
    scope = os.environ.get("MUTATE", "").split() or SCOPE
    children = os.environ.get("MUTATE_CHILDREN", "2")
    if not os.environ.get("MUTATE_REPORT_ONLY"):
        prepare()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if not os.environ.get("MUTATE_REPORT_ONLY"):
        with open(os.path.join(WORK, "mutmut-run.log"), "w") as log:
            subprocess.run([MUTMUT, "run", "--max-children", children, *scope], cwd=WORK,
                           env=env, stdout=log, stderr=subprocess.STDOUT)
    results = subprocess.run([MUTMUT, "results", "--all", "true"], cwd=WORK, env=env,
                             capture_output=True, text=True).stdout
    changed = diffs()
    counts = defaultdict(lambda: defaultdict(int))
    survivors = []
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name or status == "not checked" \
                or not any(fnmatch.fnmatch(name, glob_) for glob_ in scope):
            continue
        module = module_of(name)
        counts[module]["total"] += 1
        if status == "killed":
            counts[module]["killed"] += 1
        elif _message_only(changed.get(name, [])):
            counts[module]["message"] += 1
        else:
            survivors.append((name, status))
    print("\nmodule                            killed / total   killed+message-only / total")
    totals = defaultdict(int)
    for module in sorted(counts):
        c = counts[module]
        for key in ("killed", "message", "total"):
            totals[key] += c[key]
        print(f"{module:32} {c['killed']:4} / {c['total']:<4} {100 * c['killed'] / c['total']:5.1f}%"
              f"   {100 * (c['killed'] + c['message']) / c['total']:5.1f}%")
    if totals["total"]:
        print(f"{'all':32} {totals['killed']:4} / {totals['total']:<4} "
              f"{100 * totals['killed'] / totals['total']:5.1f}%"
              f"   {100 * (totals['killed'] + totals['message']) / totals['total']:5.1f}%")
    print(f"\n{totals['message']} survivors change only message text (not listed); "
          f"{len(survivors)} others:")
    for name, status in survivors:
        print(f"  {name} ({status}): " + " | ".join(changed.get(name, [])))
    if not totals["total"]:
        with open(os.path.join(WORK, "mutmut-run.log"), errors="replace") as log:
            print("no mutant was run; the end of build/mutate/mutmut-run.log:\n"
                  + log.read()[-3000:].replace("\r", "\n"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
