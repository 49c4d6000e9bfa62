"""Fill vendor/ with the Lambda wheels listed in requirements-vendor.txt.

Chalice packages vendor/ as is, so each wheel is downloaded for the Lambda platform (Linux
x86_64, this interpreter's CPython version) with pip and unpacked there. Run by
``make install``; safe to run again (vendor/ is rebuilt when requirements-vendor.txt or the
slimming below changes).

Slimmed for the deployment package (measured by ``make bench``):

- files the Lambda never loads are left out (:data:`LEAVE_OUT`): cel-expr-python's ``ext``
  modules (chalicelib.core.policy.celenv enables the same extensions by name from ``cel.so``'s own
  copy; each of those modules is another 4-7 MB copy of cel-cpp) and the type stubs;
- shared objects are stripped of their symbol tables (``strip --strip-unneeded``: what the
  dynamic loader needs stays; only symbols for debuggers and linkers go), when binutils'
  ``strip`` is on the PATH; without it they are kept whole and a line says so.
"""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENDOR = ROOT / "vendor"
REQUIREMENTS = ROOT / "requirements-vendor.txt"
STAMP = VENDOR / ".requirements"
# Paths (relative to vendor/) the Lambda does not need; a trailing slash names a folder.
LEAVE_OUT = ("cel_expr_python/ext/",)
LEAVE_OUT_SUFFIXES = (".pyi",)
SLIMMING = "slim-1"  # part of the stamp: changing what is left out rebuilds vendor/


def left_out(name: str) -> bool:
    """Whether the wheel member ``name`` stays out of vendor/."""
    return name.startswith(LEAVE_OUT) or name.endswith(LEAVE_OUT_SUFFIXES)


def strip_shared_objects(root: pathlib.Path) -> int:
    """Strip every ``*.so`` under root; the bytes saved (0 when ``strip`` is not installed)."""
    tool = shutil.which("strip")
    if tool is None:
        print(
            "vendor_lambda: 'strip' (binutils) not found: shared objects kept unstripped",
            file=sys.stderr,
        )
        return 0
    saved = 0
    for path in sorted(root.rglob("*.so")):
        before = path.stat().st_size
        subprocess.run([tool, "--strip-unneeded", str(path)], check=True)
        saved += before - path.stat().st_size
    return saved


def wanted() -> list:
    lines = REQUIREMENTS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def main() -> int:
    specs = wanted()
    stamp = "\n".join(specs + [SLIMMING])
    if STAMP.exists() and STAMP.read_text() == stamp:
        return 0
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            version,
            "--abi",
            f"cp{version}",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux_2_27_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "-d",
            tmp,
            *specs,
        ]
        subprocess.run(cmd, check=True)
        shutil.rmtree(VENDOR, ignore_errors=True)
        VENDOR.mkdir()
        for wheel in sorted(pathlib.Path(tmp).glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(
                    VENDOR, [name for name in archive.namelist() if not left_out(name)]
                )
        strip_shared_objects(VENDOR)
    STAMP.write_text(stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
