"""A vault secret's value at rest: sealed by the API (chalicelib.vaults) and opened by the
edge's read (chalicelib.core.vault_secrets.reveal), with the KMS envelope (moto) as in AWS
and with the local key file; bound to the account and the secret's id."""

import pytest

from chalicelib import vaults
from chalicelib.core import keywrap
from chalicelib.core import vault_secrets as vs


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    path = tmp_path / "tls-keys.secret"
    monkeypatch.setenv("TLS_KEY_FILE", str(path))
    monkeypatch.delenv("TLS_KMS_KEY_ID", raising=False)
    return path


def _round_trip():
    sealed = vaults._seal("acct_1", "secret_1", "client-secret-value")
    assert b"client-secret-value" not in repr(sealed).encode()
    assert vs.reveal("acct_1", "secret_1", {"sealed": sealed}) == "client-secret-value"
    for account, secret in (("acct_2", "secret_1"), ("acct_1", "secret_2")):
        with pytest.raises(keywrap.SealError):
            vs.reveal(account, secret, {"sealed": sealed})
    return sealed


def test_sealed_with_the_local_key_file(key_file):
    sealed = _round_trip()
    assert "local" in sealed["wrapped_key"] and key_file.exists()


def test_sealed_with_a_kms_envelope(monkeypatch, key_file):
    from moto import mock_aws
    import boto3

    with mock_aws():
        key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
        monkeypatch.setenv("TLS_KMS_KEY_ID", key_id)
        sealed = _round_trip()
        assert "kms" in sealed["wrapped_key"] and not key_file.exists()
