"""`make mutate`'s hand-written mutants of store.retrying (tests/mutation/run.py) hold to the
source they mutate: each one's text occurs exactly once in the file (a reformatted or edited
line would otherwise stop the run, as `ruff format` once did) and the mutated file still
compiles (a mutant that is a syntax error is "killed" by any test, so it would prove nothing)."""

import ast
import importlib.util
import os

import pytest

PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "mutation_run", os.path.join(PROJECT, "tests", "mutation", "run.py")
)
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)


def _source() -> str:
    with open(os.path.join(PROJECT, mutation.HAND_FILE)) as handle:
        return handle.read()


@pytest.mark.parametrize("old,new", mutation.HAND_MUTANTS)
def test_a_hand_mutant_names_its_line_once_and_compiles(old, new):
    source = _source()
    mutated = mutation.hand_mutant(source, old, new)
    assert mutated != source
    ast.parse(mutated)


def test_the_hand_mutants_are_distinct():
    assert len(set(mutation.HAND_MUTANTS)) == len(mutation.HAND_MUTANTS)
