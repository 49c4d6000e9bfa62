"""Fill vendor/ with the Lambda wheels listed in requirements-vendor.txt.

Chalice packages vendor/ as is, so each wheel is downloaded for the Lambda platform (Linux
x86_64, this interpreter's CPython version) with pip and unpacked there. Run by
``make install``; safe to run again (vendor/ is rebuilt when requirements-vendor.txt changes).
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


def wanted() -> list:
    lines = REQUIREMENTS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def main() -> int:
    specs = wanted()
    if STAMP.exists() and STAMP.read_text() == "\n".join(specs):
        return 0
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--implementation", "cp", "--python-version", version, "--abi", f"cp{version}",
               "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
               "--platform", "manylinux2014_x86_64", "-d", tmp, *specs]
        subprocess.run(cmd, check=True)
        shutil.rmtree(VENDOR, ignore_errors=True)
        VENDOR.mkdir()
        for wheel in sorted(pathlib.Path(tmp).glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(VENDOR)
    STAMP.write_text("\n".join(specs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
