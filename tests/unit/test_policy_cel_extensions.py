"""The CEL extensions (strings, math, encoders) enabled by name from the runtime's own copy
(chalicelib.core.policy.celenv.EXTENSIONS) are the ones the library's ``cel_expr_python.ext``
modules enable: same declarations, same results and same errors. The Lambda package leaves
those modules out (each carries another copy of cel-cpp), so this is what keeps the API's
validation and the edge's evaluation the same as with them.
"""

import pytest

from cel_expr_python import cel

# Installed whole in .venv (pip), left out of the Lambda package only.
from cel_expr_python.ext import ext_encoders, ext_math, ext_strings

from chalicelib.core.policy import celenv

# Every function of the three extensions at the versions used, with edge cases (errors,
# unicode, bounds) so that a different version or implementation gives a different answer.
EXPRESSIONS = [
    '"héllo".charAt(1)',
    '"abc".charAt(3)',
    '"abc".charAt(4)',
    '"hello".indexOf("l")',
    '"hello".indexOf("l", 3)',
    '"hello".indexOf("l", 9)',
    '"hello".lastIndexOf("l")',
    '"hello".lastIndexOf("l", 2)',
    '"ÀbC".lowerAscii()',
    '"àbc".upperAscii()',
    '"a-b-c".replace("-", "+")',
    '"a-b-c".replace("-", "+", 1)',
    '"a,b,,c".split(",")',
    '"a,b,c".split(",", 2)',
    '"a,b,c".split(",", 0)',
    '"hello".substring(1)',
    '"hello".substring(1, 3)',
    '"hello".substring(3, 1)',
    '"  x \\t".trim()',
    '["a", "b"].join()',
    '["a", "b"].join("/")',
    'strings.quote("a\\"b\\n")',
    '"héllo".reverse()',
    '"%s %d %f %.2f %e %x %X %o %b".format(["s", 42, 1.5, 3.14159, 1234.5, 255, 255, 8, 5])',
    '"%s".format([[1, "a"]])',
    '"%s".format([{"k": true}])',
    '"%d".format(["x"])',
    '"%s %s".format(["one"])',
    'base64.encode(b"hello")',
    'base64.decode("aGVsbG8=")',
    'base64.decode("aGVsbG8")',
    'base64.decode("!!")',
    "math.greatest(1, 2)",
    "math.greatest([1, 5, 3])",
    "math.least(1.5, -2.0)",
    "math.least([3u, 1u])",
    "math.ceil(1.2)",
    "math.floor(-1.2)",
    "math.round(2.5)",
    "math.trunc(-2.7)",
    "math.abs(-5)",
    "math.sign(-3.0)",
    "math.isInf(1.0/0.0)",
    "math.isNaN(0.0/0.0)",
    "math.isFinite(1.0)",
    "math.bitAnd(6, 3)",
    "math.bitOr(6, 3)",
    "math.bitXor(6, 3)",
    "math.bitNot(0)",
    "math.bitShiftLeft(1, 4)",
    "math.bitShiftRight(-16, 2)",
    "math.sqrt(16)",
    "math.abs(-9223372036854775807 - 1)",
    'math.greatest("a", 1)',
    "nosuch.fn(1)",
]


def _old_env(phase):
    variables = {
        name: kind for name, (kind, phases, _) in celenv.VARIABLES.items() if phase in phases
    }
    return cel.NewEnv(
        variables=variables,
        functions=celenv._functions(phase),
        extensions=[ext_strings.ExtStrings(), ext_encoders.ExtEncoders(), ext_math.ExtMath()],
    )


def _outcome(env, text):
    try:
        program = env.compile(text)
    except Exception as exc:  # noqa: BLE001 - the error text is what is compared
        return ("compile error", str(exc))
    try:
        return ("value", repr(program.eval().value()))
    except Exception as exc:  # noqa: BLE001
        return ("eval error", str(exc))


@pytest.mark.parametrize("phase", celenv.PHASES)
def test_extensions_by_name_declare_what_the_ext_modules_declare(phase):
    assert celenv.env_for(phase).config().to_yaml() == _old_env(phase).config().to_yaml()


def test_extensions_by_name_answer_like_the_ext_modules():
    new, old = celenv.env_for("on_http_request"), _old_env("on_http_request")
    differences = {
        text: (_outcome(new, text), _outcome(old, text))
        for text in EXPRESSIONS
        if _outcome(new, text) != _outcome(old, text)
    }
    assert differences == {}


def test_every_extension_function_is_enabled():
    env = celenv.env_for("on_http_request")
    values = [_outcome(env, text) for text in EXPRESSIONS[:-2]]
    compile_errors = [
        text for text, (kind, _) in zip(EXPRESSIONS, values) if kind == "compile error"
    ]
    assert compile_errors == []
    assert _outcome(env, "nosuch.fn(1)")[0] == "compile error"


def test_without_the_extensions_their_functions_are_refused():
    """The check above would pass if neither way enabled anything: the functions need them."""
    bare = cel.NewEnv()
    assert _outcome(bare, '"abc".upperAscii()')[0] == "compile error"
    assert _outcome(bare, 'base64.encode(b"x")')[0] == "compile error"
    assert _outcome(bare, "math.greatest(1, 2)")[0] == "compile error"
