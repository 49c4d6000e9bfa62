"""chalicelib.core.ssh_keys: the SSH public key rules at their boundaries, and parity with
cryptography's ``load_ssh_public_key`` (the reference parser; the API's package carries none):
every line accepted here loads there as the same key, and the malformed keys it refuses are
refused here too. Where this module is stricter (RSA size, DSA, compressed points, integers
not minimally encoded), the test says so."""

import base64
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from chalicelib.core import ssh_keys
from chalicelib.core.ssh_keys import InvalidKey


def _string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _mpint(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "big")  # a leading 0 when needed
    return _string(raw)


def _line(blob: bytes, key_type: str) -> str:
    return f"{key_type} {base64.b64encode(blob).decode()}"


def _openssh(key) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


KEYS = {
    "ed25519": lambda: ed25519.Ed25519PrivateKey.generate(),
    "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
    "p521": lambda: ec.generate_private_key(ec.SECP521R1()),
    "rsa2048": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "rsa3072e3": lambda: rsa.generate_private_key(public_exponent=3, key_size=3072),
}


@pytest.mark.parametrize("kind", list(KEYS))
def test_every_key_cryptography_makes_is_accepted_as_the_same_key(kind):
    key = KEYS[kind]()
    line = _openssh(key)
    canonical, blob = ssh_keys.parse(f"  {line}   a  comment\t")
    assert canonical == f"{line} a comment"  # whitespace collapsed, comment kept
    assert base64.b64encode(blob).decode() == line.split()[1]
    loaded = load_ssh_public_key(canonical.encode())
    assert (
        loaded.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        == line.encode()
    )


def test_the_fingerprint_is_openssh_s():
    # ssh-keygen -lf of this line prints SHA256:kpkcj9JNwFSkCBy2cOlq8GRCYVNnpVnJYOLyLM8bXds
    line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINlu6H/6nOORLOkHfbVA4trCSd7Dk+g1SBR6mckn9c9x"
    _, blob = ssh_keys.parse(line)
    assert ssh_keys.fingerprint(blob) == "SHA256:kpkcj9JNwFSkCBy2cOlq8GRCYVNnpVnJYOLyLM8bXds"
    assert len(ssh_keys.digest(blob)) == 64


def _refused_by_both(line: str, why: str) -> None:
    with pytest.raises(InvalidKey) as refused:
        ssh_keys.parse(line)
    assert why in str(refused.value)
    with pytest.raises((ValueError, TypeError)):
        load_ssh_public_key(line.encode())


def test_a_point_off_its_curve_is_refused_by_both():
    for curve, name in ((ec.SECP256R1(), "nistp256"), (ec.SECP384R1(), "nistp384")):
        point = (
            ec.generate_private_key(curve)
            .public_key()
            .public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )
        bad = point[:-1] + bytes([point[-1] ^ 1])
        key_type = f"ecdsa-sha2-{name}"
        blob = _string(key_type.encode()) + _string(name.encode()) + _string(bad)
        _refused_by_both(_line(blob, key_type), "the key's point is not on its curve")


def test_malformed_blobs_are_refused_by_both():
    good = base64.b64decode(_openssh(KEYS["ed25519"]()).split()[1])
    _refused_by_both(_line(good + b"\x00", "ssh-ed25519"), "goes on past the key")
    _refused_by_both(_line(good[:-1], "ssh-ed25519"), "ends early")
    _refused_by_both(_line(good, "ssh-rsa"), "is not a ssh-rsa key")
    short = _string(b"ssh-ed25519") + _string(b"\x01" * 31)
    _refused_by_both(_line(short, "ssh-ed25519"), "an ssh-ed25519 key is 32 bytes")
    wrong_curve = (
        _string(b"ecdsa-sha2-nistp256") + _string(b"nistp384") + _string(b"\x04" + b"\x01" * 64)
    )
    _refused_by_both(_line(wrong_curve, "ecdsa-sha2-nistp256"), "curve is not nistp256")


@pytest.mark.parametrize(
    "line, why",
    [
        ("", "expected '<type> <base64 key> [comment]'"),
        ("ssh-ed25519", "expected"),
        ("ssh-ed25519 AAAA=A", "not base64"),
        ("ssh-ed25519 AAA", "not base64"),
        ("sk-ssh-ed25519@openssh.com AAAA", "is not an accepted key type"),
        ("ssh-ed25519-cert-v01@openssh.com AAAA", "is not an accepted key type"),
        ('command="x" ssh-ed25519 AAAA', "authorized_keys options are not accepted"),
    ],
)
def test_lines_that_are_not_one_key(line, why):
    with pytest.raises(InvalidKey) as refused:
        ssh_keys.parse(line)
    assert why in str(refused.value)


@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
def test_stricter_than_cryptography_dsa_and_small_rsa():
    dsa_line = _openssh(dsa.generate_private_key(key_size=1024))
    load_ssh_public_key(dsa_line.encode())  # cryptography takes it; OpenSSH dropped DSA
    with pytest.raises(InvalidKey, match="is not an accepted key type"):
        ssh_keys.parse(dsa_line)
    small = _openssh(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    load_ssh_public_key(small.encode())
    with pytest.raises(InvalidKey, match="an RSA key of 1024 bits; 2048 to 8192 bits"):
        ssh_keys.parse(small)


def _rsa_line(e: int, n: int, mpint=_mpint) -> str:
    return _line(_string(b"ssh-rsa") + mpint(e) + mpint(n), "ssh-rsa")


@pytest.mark.parametrize(
    "bits, accepted", [(2047, False), (2048, True), (8192, True), (8193, False)]
)
def test_rsa_sizes_at_their_boundaries(bits, accepted):
    line = _rsa_line(65537, (1 << (bits - 1)) | 1)
    if accepted:
        ssh_keys.parse(line)
    else:
        with pytest.raises(InvalidKey, match=f"an RSA key of {bits} bits"):
            ssh_keys.parse(line)


@pytest.mark.parametrize(
    "e, n",
    [
        (65537, (1 << 2047) | 2),  # even modulus
        (65536, (1 << 2047) | 1),  # even exponent
        (1, (1 << 2047) | 1),  # exponent below 3
        ((1 << 2047) | 3, (1 << 2047) | 1),  # exponent not below the modulus
    ],
)
def test_rsa_numbers_that_are_no_public_key(e, n):
    with pytest.raises(InvalidKey, match="numbers are not those of a public key"):
        ssh_keys.parse(_rsa_line(e, n))


def test_integers_are_minimal_and_positive():
    n = (1 << 2047) | 1
    padded = lambda v: _string(b"\x00" + _mpint(v)[4:])  # noqa: E731 - one zero too many
    with pytest.raises(InvalidKey, match="not minimally encoded"):
        ssh_keys.parse(_rsa_line(65537, n, mpint=padded))
    negative = lambda v: _string(v.to_bytes((v.bit_length() + 7) // 8, "big"))  # noqa: E731
    with pytest.raises(InvalidKey, match="negative"):
        ssh_keys.parse(_rsa_line(65537, n, mpint=negative))


def test_compressed_points_are_refused():
    point = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    )
    blob = _string(b"ecdsa-sha2-nistp256") + _string(b"nistp256") + _string(point)
    with pytest.raises(InvalidKey, match="not an uncompressed point"):
        ssh_keys.parse(_line(blob, "ecdsa-sha2-nistp256"))


def test_the_line_is_at_most_8192_bytes_and_one_line():
    line = _openssh(KEYS["ed25519"]())
    padded = line + " " + "c" * (8192 - len(line) - 1)
    assert len(padded) == 8192
    ssh_keys.parse(padded)
    with pytest.raises(InvalidKey, match="over 8192 bytes"):
        ssh_keys.parse(padded + "c")
    with pytest.raises(InvalidKey, match="one line"):
        ssh_keys.parse(line + "\n" + line)
    with pytest.raises(InvalidKey, match="printable ASCII"):
        ssh_keys.parse(line + " caf\u00e9")
