"""What the Lambda package holds and what its cold start loads (issue 14; sizes and times are
measured by `make bench`, never asserted). The package itself is built and run in
tests/functional/test_packaging.py."""
import os
import subprocess
import sys

from tests.support.api import PROJECT_DIR

sys.path.insert(0, os.path.join(PROJECT_DIR, "scripts"))
import vendor_lambda  # noqa: E402


def test_app_import_loads_neither_cryptography_nor_the_cel_runtime():
    """Both are loaded on first use (a certificate authority's creation, a traffic policy):
    every cold start of the API and of the authorizer would pay for them otherwise."""
    code = ("import sys, app; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'cryptography', 'cel_expr_python', 'jwt'}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True,
                            text=True, env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_extended_key_usage_names_are_cryptographys_oids():
    from cryptography.x509.oid import ExtendedKeyUsageOID as E

    from chalicelib.certificate_authorities import _EKU_NAMES
    assert _EKU_NAMES == {
        E.SERVER_AUTH.dotted_string: "server_auth", E.CLIENT_AUTH.dotted_string: "client_auth",
        E.CODE_SIGNING.dotted_string: "code_signing",
        E.EMAIL_PROTECTION.dotted_string: "email_protection",
        E.TIME_STAMPING.dotted_string: "time_stamping",
        E.OCSP_SIGNING.dotted_string: "ocsp_signing"}


def test_vendoring_leaves_out_the_cel_ext_modules_and_stubs_only():
    assert vendor_lambda.left_out("cel_expr_python/ext/ext_math.cpython-311-x86_64-linux-gnu.so")
    assert vendor_lambda.left_out("cel_expr_python/cel.pyi")
    assert not vendor_lambda.left_out("cel_expr_python/cel.cpython-311-x86_64-linux-gnu.so")
    assert not vendor_lambda.left_out("cel_expr_python-0.1.3.dist-info/METADATA")
