"""What the Lambda package holds and what its cold start loads (sizes and times are
measured by `make bench`, never asserted). The package itself is built and run in
tests/functional/test_packaging.py."""

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from stacks.paths import PROJECT_DIR

from scripts import deploy_stack, vendor_lambda


def test_app_import_loads_neither_the_certificate_parser_nor_the_cel_runtime():
    """Both are loaded on first use (a certificate authority's creation, a traffic policy):
    every cold start of the API and of the authorizer would pay for them otherwise.

    pyOpenSSL is hidden: it is in the development virtualenv only for the ACME worker's
    ``acme`` library, and botocore imports it (and so cryptography) whenever it is installed
    (botocore.httpsession's optional urllib3.contrib.pyopenssl). The Lambda package has no
    pyOpenSSL (tests/functional/test_packaging.py runs the app from the package)."""
    code = (
        "import sys; sys.modules['OpenSSL'] = None; import app; print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'asn1crypto', 'cryptography', 'cel_expr_python', 'jwt'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_extended_key_usage_names_are_cryptographys_oids():
    from cryptography.x509.oid import ExtendedKeyUsageOID as E

    from chalicelib.certificate_authorities import _EKU_NAMES

    assert _EKU_NAMES == {
        E.SERVER_AUTH.dotted_string: "server_auth",
        E.CLIENT_AUTH.dotted_string: "client_auth",
        E.CODE_SIGNING.dotted_string: "code_signing",
        E.EMAIL_PROTECTION.dotted_string: "email_protection",
        E.TIME_STAMPING.dotted_string: "time_stamping",
        E.OCSP_SIGNING.dotted_string: "ocsp_signing",
    }


def test_vendoring_leaves_out_the_cel_ext_modules_and_stubs_only():
    assert vendor_lambda.left_out("cel_expr_python/ext/ext_math.cpython-311-x86_64-linux-gnu.so")
    assert vendor_lambda.left_out("cel_expr_python/cel.pyi")
    assert not vendor_lambda.left_out("cel_expr_python/cel.cpython-311-x86_64-linux-gnu.so")
    assert not vendor_lambda.left_out("cel_expr_python-0.1.3.dist-info/METADATA")


def _zip(path, members):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


@pytest.mark.skipif(shutil.which("strip") is None, reason="binutils' strip is not installed")
def test_slim_package_leaves_out_strips_and_adds_unchecked_bytecode(tmp_path):
    import re2

    elf = open(re2._re2.__file__, "rb").read()  # a real shared object with its symbols
    path = tmp_path / "deployment.zip"
    _zip(
        path,
        {
            "app.py": "import chalicelib\n",
            "chalicelib/__init__.py": "X = 1\n",
            "chalicelib/__pycache__/__init__.cpython-311.pyc": b"stale",
            "botocore/__init__.py": "",
            "botocore-1.0.dist-info/METADATA": "",
            "jmespath-1.1.0.data/scripts/jp.py": "",
            "yaml/__init__.py": "",
            "yaml/_yaml.cpython-311-x86_64-linux-gnu.so": elf,
            "asn1crypto/cms.py": "",
            "asn1crypto/_inet.py": "",
            "asn1crypto/x509.py": "",
            "jwt/api.pyi": "",
            "_native.cpython-311-x86_64-linux-gnu.so": elf,
            "broken.py": "def (:\n",
        },
    )
    done = deploy_stack.slim_package(str(path))
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        native = archive.read("_native.cpython-311-x86_64-linux-gnu.so")
        pyc = archive.read(importlib.util.cache_from_source("chalicelib/__init__.py"))
    tag = sys.implementation.cache_tag
    assert names == {
        "app.py",
        "chalicelib/__init__.py",
        "yaml/__init__.py",
        "broken.py",
        "asn1crypto/x509.py",
        f"asn1crypto/__pycache__/x509.{tag}.pyc",
        "_native.cpython-311-x86_64-linux-gnu.so",
        f"__pycache__/app.{tag}.pyc",
        f"chalicelib/__pycache__/__init__.{tag}.pyc",
        f"yaml/__pycache__/__init__.{tag}.pyc",
    }
    assert set(done["removed_runtime_packages"]) == {
        "botocore",
        "botocore (dist-info)",
        "jmespath (dist-info)",
    }
    assert done["strip"] and 0 < len(native) < len(elf)
    assert done["stripped_bytes_uncompressed"] == len(elf) - len(native)
    assert pyc[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(pyc[4:8], "little") == 1
    assert pyc[8:16] == importlib.util.source_hash(b"X = 1\n")


def test_slim_package_without_strip_or_bytecode_keeps_them_as_they_are(tmp_path):
    path = tmp_path / "deployment.zip"
    _zip(
        path,
        {
            "app.py": "",
            "chalicelib/__pycache__/x.cpython-311.pyc": b"kept",
            "lib.so": b"\x7fELF not really",
            "six.py": "",
        },
    )
    done = deploy_stack.slim_package(str(path), strip=False, bytecode=False)
    with zipfile.ZipFile(path) as archive:
        assert set(archive.namelist()) == {
            "app.py",
            "chalicelib/__pycache__/x.cpython-311.pyc",
            "lib.so",
        }
        assert archive.read("lib.so") == b"\x7fELF not really"
    assert done["strip"] is False and done["bytecode_bytes"] == 0
