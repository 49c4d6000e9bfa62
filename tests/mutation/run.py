"""`make mutate`: mutation testing (mutmut) of the modules that hold the documented rules.

Each module in MODULES is mutated in its own scratch copy of the project
(build/mutate/<module>/, so the work tree is never touched and a run narrowed to one module
keeps the others' last results): mutmut mutates only that module's file (``only_mutate``),
only the functions its globs name, and runs against each mutant the unit tests that call
the mutated function (tests/unit: the rules are tested where they live, in-process and
without a server; the whole selection takes ~15 s, so a surviving mutant costs seconds, not
the minute apiece the HTTP-level rule suites cost when every request passes through
validation and web). Then it prints killed / total per module and every surviving mutant as
a diff.

Module-level constants (``MAX_X = 10``) are not mutated by mutmut (it mutates functions);
the boundary tests (tests/unit/test_documented_limits.py) write the documented numbers out,
so a changed constant fails them instead.

    make mutate                                  # every module, one after the other
    make mutate MUTATE='chalicelib.core.acl.*'        # some of it (globs over mutant names;
                                                 # only the modules they reach are re-run)
    MUTATE_REPORT_ONLY=1 make mutate             # print the last runs' figures again

A survivor that changes only message text (a string literal, or a message replaced by None)
is counted apart and listed apart: where the message is part of the contract (it names the
field or the limit), a test asserts it; the rest are explained in tests/mutation/SURVIVORS.md.
"""

import configparser
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

# module -> the mutant-name globs in scope: whole rule modules, and the rule checks of others
MODULES = {
    "chalicelib.validation": ["chalicelib.validation.*"],
    "chalicelib.core.acl": ["chalicelib.core.acl.*"],
    "chalicelib.core.hostnames": ["chalicelib.core.hostnames.*"],
    "chalicelib.http_headers": ["chalicelib.http_headers.*"],
    "chalicelib.traffic_policy": ["chalicelib.traffic_policy.*"],
    "chalicelib.core.policy.document": ["chalicelib.core.policy.document.*"],
    "chalicelib.core.ids": ["chalicelib.core.ids.*"],
    "chalicelib.core.errors": ["chalicelib.core.errors.*"],
    "chalicelib.core.store": [
        "chalicelib.core.store.x_retrying*",
        "chalicelib.core.store.x_backoff*",
    ],
    "chalicelib.web": [
        "chalicelib.web.x__check_request*",
        "chalicelib.web.x_list_params*",
        "chalicelib.web.x_page*",
        "chalicelib.web.x_json_object*",
        "chalicelib.web.x_reject_query*",
    ],
    "chalicelib.edge_modules": [
        "chalicelib.edge_modules.x_check_hostport*",
        "chalicelib.edge_modules.x__check_*",
        "chalicelib.edge_modules.x_parse_module*",
        "chalicelib.edge_modules.x_check_policy_refs*",
    ],
    "chalicelib.reserved_domains": ["chalicelib.reserved_domains.x__check_*"],
    "chalicelib.http_response_backends": [
        "chalicelib.http_response_backends.x__status*",
        "chalicelib.http_response_backends.x__headers*",
    ],
    "chalicelib.bot_users": ["chalicelib.bot_users.x__check_name*"],
    "chalicelib.ip_policies": [
        "chalicelib.ip_policies.x_check_cidr*",
        "chalicelib.ip_policies.x__check_action*",
    ],
    "chalicelib.https_edges": [
        "chalicelib.https_edges.x__patterns*",
        "chalicelib.https_edges.x__match_type*",
        "chalicelib.https_edges.x__check_*",
    ],
    "chalicelib.auth": ["chalicelib.auth.x_new_secret__*", "chalicelib.auth.x_bearer_token__*"],
    "chalicelib.abuse_reports": [
        "chalicelib.abuse_reports.x_url_host*",
        "chalicelib.abuse_reports.x__check_urls*",
    ],
    "chalicelib.core.audit_events": [
        "chalicelib.core.audit_events.x_pending*",
        "chalicelib.core.audit_events.x_unmark*",
        "chalicelib.core.audit_events.x_claim*",
    ],
    "chalicelib.core.online": ["chalicelib.core.online.x_take_partner_claim*"],
    "chalicelib.core.policy.breaker": ["chalicelib.core.policy.breaker.*"],
    "chalicelib.core.policy.holding": ["chalicelib.core.policy.holding.*"],
    "chalicelib.core.policy.celenv": [
        "chalicelib.core.policy.celenv.x_variable_reads*",
        "chalicelib.core.policy.celenv.x_expression_reads*",
    ],
    "chalicelib.core.policy.ipintel": [
        "chalicelib.core.policy.ipintel.x_geo*",
        "chalicelib.core.policy.ipintel.x_load_categories*",
        "chalicelib.core.policy.ipintel.x_categories*",
    ],
}
TESTS = ["tests/unit"]

# mutmut does not mutate decorated functions, so store.retrying's loop (inside a wrapper
# decorated with functools.wraps) gets no mutant from it. These hand-written mutants of that
# loop stand in: each is applied to a scratch copy and the store's unit tests must fail on it.
HAND_FILE = "chalicelib/core/store.py"
HAND_TESTS = ["tests/unit/test_store.py", "tests/unit/test_documented_limits.py"]
HAND_MUTANTS = [
    ("for attempt in range(RETRIES):", "for attempt in range(RETRIES - 1):"),
    ("for attempt in range(RETRIES):", "for attempt in range(RETRIES + 1):"),
    ("            except VersionConflict:\n", "            except Exception:\n"),
    ("if attempt + 1 < RETRIES:", "if attempt + 1 <= RETRIES:"),
    ("if attempt + 1 < RETRIES:", "if attempt + 2 < RETRIES:"),
    ("if attempt + 1 < RETRIES:", "if attempt < RETRIES:"),
    ("time.sleep(backoff(attempt))", "time.sleep(backoff(attempt + 1))"),
    ("time.sleep(backoff(attempt))", "pass"),
    ("return func(*args, **kwargs)", "return func(*args)"),
    ("return func(*args, **kwargs)", "func(*args, **kwargs)"),
    ("    @functools.wraps(func)\n    def wrapper", "    def wrapper"),
    (
        '        raise errors.Conflict(\n            "The resource was changed',
        '        return (\n            "The resource was changed',
    ),
    (
        '        raise errors.Conflict(\n            "The resource was changed',
        '        raise errors.Internal(\n            "The resource was changed',
    ),
]


# What the scratch copy holds: every tracked file (the unit tests read docs, the dashboard's
# pages, requirement files and the repository's own text), none of the untracked ones.
def tracked() -> list:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=PROJECT, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name]


def workdir(module: str) -> str:
    return os.path.join(WORK, module.split(".", 1)[1])


def prepare(module: str) -> str:
    work = workdir(module)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for name in tracked():
        target = os.path.join(work, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(PROJECT, name), target)
    config = configparser.ConfigParser()
    config.read(os.path.join(PROJECT, "tests", "mutation", "setup.cfg"))
    config["mutmut"]["only_mutate"] = module.replace(".", "/") + ".py"
    config["mutmut"]["pytest_add_cli_args_test_selection"] = "\n" + "\n".join(TESTS)
    # mutmut runs the tests in its own copy (mutants/): every tracked top-level entry goes in
    tops = sorted({name.split("/")[0] for name in tracked()} - {"chalicelib", "tests"})
    config["mutmut"]["also_copy"] = "\n" + "\n".join(tops)
    with open(os.path.join(work, "setup.cfg"), "w") as handle:
        config.write(handle)
    return work


def module_of(mutant: str) -> str:
    return re.sub(r"\.x[_ǁ].*$", "", mutant)


_STRING = re.compile(r"""[rbfuRBFU]{0,2}("([^"\\]|\\.)*"|'([^'\\]|\\.)*')""")


def _message_only(diff: list) -> bool:
    """True when the mutant changes nothing but message text: a string literal's content, or a
    message argument replaced by None."""

    def norm(line: str) -> str:
        line = _STRING.sub("S", line)
        return re.sub(r"\bstr\((exc|None)\)", "S", line).replace("None", "S")

    minus = [norm(line[1:]) for line in diff if line.startswith("-")]
    plus = [norm(line[1:]) for line in diff if line.startswith("+")]
    return minus == plus


def diffs(work: str) -> dict:
    """mutant name -> the changed lines against the original function (from mutants/)."""
    functions = {}
    root = os.path.join(work, "mutants")
    for path in glob.glob(os.path.join(root, "chalicelib", "**", "*.py"), recursive=True):
        module = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
        with open(path) as handle:
            source = handle.read()
        lines = source.splitlines()
        for start, line in enumerate(lines):
            match = re.match(r"^(\s*)def (x\S*?__mutmut_(?:orig|\d+))\(", line)
            if not match:
                continue
            indent, body = len(match.group(1)), []
            for following in lines[start + 1 :]:  # the def's body: the lines indented deeper
                if (
                    following.strip()
                    and len(following) - len(following.lstrip()) <= indent
                    and not following.lstrip().startswith(")")
                ):
                    break
                body.append(following)
            signature = re.sub(r"__mutmut_(orig|\d+)\(", "(", line)  # defaults are mutated too
            functions[f"{module}.{match.group(2)}"] = [signature] + body
    result = {}
    for name, lines in functions.items():
        if name.endswith("__mutmut_orig"):
            continue
        original = functions.get(re.sub(r"__mutmut_\d+$", "__mutmut_orig", name), [])
        result[name] = [
            line.strip()
            for line in difflib.unified_diff(original, lines, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
    return result


def scope_of(module: str, wanted: list) -> list:
    """The globs to run in ``module``: its own, narrowed by MUTATE's when given."""
    if not wanted:
        return MODULES[module]
    whole = [own for own in MODULES[module] if any(fnmatch.fnmatch(own, g) for g in wanted)]
    return whole or [g for g in wanted if g.startswith(module + ".x")]


def run(module: str, globs: list, children: str) -> None:
    work = prepare(module)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    print(f"mutating {module} ({' '.join(globs)}) in {os.path.relpath(work, PROJECT)}", flush=True)
    with open(os.path.join(work, "mutmut-run.log"), "w") as log:
        subprocess.run(
            [MUTMUT, "run", "--max-children", children, *globs],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def hand_mutant(original: str, old: str, new: str) -> str:
    """``original`` with its one occurrence of ``old`` replaced by ``new`` (AssertionError when
    ``old`` is not found exactly once: the source moved under the hand mutant)."""
    assert original.count(old) == 1, old
    return original.replace(old, new)


def run_hand_mutants() -> None:
    """Apply each of HAND_MUTANTS to a scratch copy; record killed/survived in hand.txt."""
    work = prepare("chalicelib.store_retrying")
    target = os.path.join(work, HAND_FILE)
    with open(target) as handle:
        original = handle.read()
    lines = []
    for index, (old, new) in enumerate(HAND_MUTANTS, 1):
        with open(target, "w") as handle:
            handle.write(hand_mutant(original, old, new))
        code = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *HAND_TESTS],
            cwd=work,
            capture_output=True,
        ).returncode
        status = "killed" if code else "survived"
        flat = [" ".join(text.split()) for text in (old, new)]
        lines.append(
            f"chalicelib.core.store.x_retrying__hand_{index}: {status}: - {flat[0]} | + {flat[1]}"
        )
    with open(target, "w") as handle:
        handle.write(original)
    with open(os.path.join(work, "hand.txt"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def hand_results() -> list:
    """(name, status, diff) of the last hand-mutant run, if any."""
    path = os.path.join(workdir("chalicelib.store_retrying"), "hand.txt")
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as handle:
        for line in handle.read().splitlines():
            name, status, diff = line.split(": ", 2)
            rows.append((name, status, diff.split(" | ")))
    return rows


def _explained() -> set:
    """The mutant names tests/mutation/SURVIVORS.md explains (each in backquotes)."""
    path = os.path.join(PROJECT, "tests", "mutation", "SURVIVORS.md")
    if not os.path.exists(path):
        return set()
    with open(path) as handle:
        return set(re.findall(r"`(chalicelib\.[\w.ǁ]+__(?:mutmut|hand)_\d+)`", handle.read()))


def report(modules: list) -> int:
    counts = defaultdict(lambda: defaultdict(int))
    survivors, messages = [], []
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for module in modules:
        work = workdir(module)
        if not os.path.isdir(os.path.join(work, "mutants")):
            continue
        results = subprocess.run(
            [MUTMUT, "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True
        ).stdout
        changed = diffs(work)
        for line in results.splitlines():
            name, _, status = line.strip().rpartition(": ")
            if (
                not name
                or status == "not checked"
                or not any(fnmatch.fnmatch(name, glob_) for glob_ in MODULES[module])
            ):
                continue
            counts[module]["total"] += 1
            if status == "killed":
                counts[module]["killed"] += 1
            elif _message_only(changed.get(name, [])):
                counts[module]["message"] += 1
                messages.append((name, status, changed.get(name, [])))
            else:
                survivors.append((name, status, changed.get(name, [])))
    for name, status, diff in hand_results():
        counts["chalicelib.core.store (retrying, by hand)"]["total"] += 1
        if status == "killed":
            counts["chalicelib.core.store (retrying, by hand)"]["killed"] += 1
        else:
            survivors.append((name, status, diff))
    print(f"\n{'module':40} killed / total   killed+message-only / total")
    totals = defaultdict(int)
    for module in sorted(counts):
        c = counts[module]
        for key in ("killed", "message", "total"):
            totals[key] += c[key]
        print(
            f"{module:40} {c['killed']:4} / {c['total']:<4} {100 * c['killed'] / c['total']:5.1f}%"
            f"   {100 * (c['killed'] + c['message']) / c['total']:5.1f}%"
        )
    if totals["total"]:
        print(
            f"{'all':40} {totals['killed']:4} / {totals['total']:<4} "
            f"{100 * totals['killed'] / totals['total']:5.1f}%"
            f"   {100 * (totals['killed'] + totals['message']) / totals['total']:5.1f}%"
        )
    explained = _explained()
    for title, rows in (("change only message text", messages), ("change more", survivors)):
        print(f"\n{len(rows)} survivors {title}:")
        for name, status, diff in rows:
            mark = "" if name in explained else "  [not in SURVIVORS.md]"
            print(f"  {name} ({status}){mark}: " + " | ".join(diff))
    unexplained = [name for name, _, _ in messages + survivors if name not in explained]
    print(f"\n{len(unexplained)} survivors are not explained in tests/mutation/SURVIVORS.md")
    if not totals["total"]:
        for module in modules:
            path = os.path.join(workdir(module), "mutmut-run.log")
            if os.path.exists(path):
                with open(path, errors="replace") as log:
                    print(
                        f"no mutant was counted; the end of {path}:\n"
                        + log.read()[-3000:].replace("\r", "\n")
                    )
        return 1
    return 0


def main() -> int:
    wanted = os.environ.get("MUTATE", "").split()
    children = os.environ.get("MUTATE_CHILDREN", "2")
    modules = [module for module in MODULES if scope_of(module, wanted)]
    if not modules:
        print(f"MUTATE={' '.join(wanted)!r} names none of: {', '.join(MODULES)}")
        return 2
    if not os.environ.get("MUTATE_REPORT_ONLY"):
        for module in modules:
            run(module, scope_of(module, wanted), children)
        if "chalicelib.core.store" in modules:
            run_hand_mutants()
    return report(list(MODULES))


if __name__ == "__main__":
    sys.exit(main())
