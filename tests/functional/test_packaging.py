"""The deployable stack, checked without Docker or AWS.

- ``chalice package --merge-template`` of the prod stage, linted by cfn-lint, holds the table
  (on-demand, PITR, deletion protection), the gateway responses in the contract's error body,
  and least-privilege roles.
- The generated .chalice/ files are up to date; stages and their table names agree.
- The gateway responses say what the local twin (chalicelib.gateway) answers.
- docker-compose.yml is a valid compose file that starts LocalStack, the edge and the agent on
  loopback, the agent with a bot-owned credential from the one-shot agent-credential service.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml

from chalicelib.core import errors
from stacks.paths import PROJECT_DIR

from scripts import deploy_stack

pytestmark = pytest.mark.processes  # chalice package, cfn-lint: left out by make test-fast

VENV_BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def prod_template(tmp_path_factory):
    out = tmp_path_factory.mktemp("package-prod")
    env = dict(os.environ, AWS_DEFAULT_REGION="us-east-1")
    merge = os.path.join(PROJECT_DIR, ".chalice", "resources-prod.json")
    result = subprocess.run(
        [
            os.path.join(VENV_BIN, "chalice"),
            "package",
            "--stage",
            "prod",
            "--merge-template",
            merge,
            str(out),
        ],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Could not install dependencies" not in output, output
    path = out / "sam.json"
    with open(path) as handle:
        return str(path), json.load(handle)


def test_deployment_package_holds_the_policy_engines_runtime(prod_template):
    """The API validates traffic policies with the engine, so the Lambda needs the CEL
    runtime (vendored: Chalice refuses its wheel's tag, see requirements-vendor.txt)."""
    import zipfile

    path, _ = prod_template
    names = set(zipfile.ZipFile(os.path.join(os.path.dirname(path), "deployment.zip")).namelist())
    version = f"{sys.version_info.major}{sys.version_info.minor}"
    assert f"cel_expr_python/cel.cpython-{version}-x86_64-linux-gnu.so" in names
    assert (
        "chalicelib/core/policy/engine.py" in names and "chalicelib/core/policy/jwks.py" in names
    )
    assert "asn1crypto/x509.py" in names
    assert not [n for n in names if n.startswith(("jwt/", "cryptography/"))]  # the edge's


def test_packaged_prod_template_passes_cfn_lint(prod_template):
    path, _ = prod_template
    result = subprocess.run(
        [os.path.join(VENV_BIN, "cfn-lint"), "--", path],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prod_table_is_on_demand_with_pitr_and_deletion_protection(prod_template):
    _, template = prod_template
    table = template["Resources"]["ServiceTable"]
    props = table["Properties"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert props["TableName"] == "tunnel-service-prod"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain"
    assert {(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]} == {
        ("pk", "S"),
        ("sk", "S"),
    }
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]


def test_functions_use_the_stage_table_name(prod_template):
    _, template = prod_template
    functions = {
        k: v for k, v in template["Resources"].items() if v["Type"] == "AWS::Serverless::Function"
    }
    assert set(functions) == {"APIHandler", "ApiKeyAuthorizer", "AcmeWorker"}
    for function in functions.values():
        assert (
            function["Properties"]["Environment"]["Variables"]["TABLE_NAME"]
            == template["Resources"]["ServiceTable"]["Properties"]["TableName"]
        )


EXPECTED_GATEWAY = {
    "UNAUTHORIZED": (401, errors.UNAUTHORIZED),
    "ACCESS_DENIED": (403, errors.FORBIDDEN),
    "MISSING_AUTHENTICATION_TOKEN": (404, errors.NOT_FOUND),
    "AUTHORIZER_FAILURE": (500, errors.INTERNAL),
    "AUTHORIZER_CONFIGURATION_ERROR": (500, errors.INTERNAL),
    "REQUEST_TOO_LARGE": (413, errors.BODY_TOO_LARGE),
    "UNSUPPORTED_MEDIA_TYPE": (415, errors.UNSUPPORTED_MEDIA_TYPE),
    "THROTTLED": (429, errors.RATE_LIMITED),
    "QUOTA_EXCEEDED": (429, errors.RATE_LIMITED),
    "DEFAULT_4XX": (400, None),
    "DEFAULT_5XX": (500, errors.INTERNAL),
}


def _gateway_responses(template):
    return {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in template["Resources"].values()
        if r.get("Type") == "AWS::ApiGateway::GatewayResponse"
    }


def test_gateway_responses_give_the_contract_error_body(prod_template):
    from chalicelib.core import errors

    _, template = prod_template
    responses = _gateway_responses(template)
    assert set(EXPECTED_GATEWAY) <= set(responses)
    for response_type, props in responses.items():
        assert props["RestApiId"] == {"Ref": "RestAPI"}
        body = json.loads(props["ResponseTemplates"]["application/json"])
        status = int(props["StatusCode"])
        expected_status, expected_code = EXPECTED_GATEWAY.get(response_type, (status, None))
        assert status == expected_status, response_type
        assert set(body) == {"error_code", "status_code", "msg", "details"}
        assert body["status_code"] == status and body["msg"]
        assert errors.CATALOG[body["error_code"]] == status
        if expected_code:
            assert body["error_code"] == expected_code
        assert body["details"] == {"operation_id": "op_$context.requestId"}
        assert (
            props["ResponseParameters"]["gatewayresponse.header.Content-Type"]
            == "'application/json'"
        )


def test_gateway_responses_match_the_local_twin(inprocess_api):
    """What the deployed gateway says for an unknown path / a bad key, the local twin says."""
    responses = {
        t: json.loads(p["ResponseTemplates"]["application/json"])
        for t, p in _gateway_responses(deploy_stack.merge_template("prod")).items()
    }
    unknown = inprocess_api.request("GET", "/no/such/path").json
    assert (unknown["error_code"], unknown["msg"]) == (
        responses["MISSING_AUTHENTICATION_TOKEN"]["error_code"],
        responses["MISSING_AUTHENTICATION_TOKEN"]["msg"],
    )
    refused = inprocess_api.request("GET", "/api_keys", key="not-a-key").json
    assert (refused["error_code"], refused["msg"]) == (
        responses["UNAUTHORIZED"]["error_code"],
        responses["UNAUTHORIZED"]["msg"],
    )


def _statements(role):
    for policy in role["Properties"]["Policies"]:
        yield from policy["PolicyDocument"]["Statement"]


def test_roles_allow_only_the_table_actions_on_the_table(prod_template):
    _, template = prod_template
    resources = template["Resources"]
    roles = {k: v for k, v in resources.items() if v["Type"] == "AWS::IAM::Role"}
    assert set(roles) == {"ApiHandlerRole", "ApiKeyAuthorizerRole", "AcmeWorkerRole"}
    table = {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
        "dynamodb:TransactWriteItems",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
        "dynamodb:BatchGetItem",
    }
    used = {
        "ApiHandlerRole": table,
        "ApiKeyAuthorizerRole": {"dynamodb:GetItem"},
        "AcmeWorkerRole": table,
    }
    seals = {"ApiHandlerRole", "AcmeWorkerRole"}  # they seal private keys (KMS)
    for name, role in roles.items():
        assert "ManagedPolicyArns" not in role["Properties"]
        dynamodb, logs, kms = set(), set(), set()
        for statement in _statements(role):
            assert statement["Effect"] == "Allow"
            actions = set(statement["Action"])
            assert not any("*" in action for action in actions), statement
            if all(a.startswith("dynamodb:") for a in actions):
                assert statement["Resource"] == {"Fn::GetAtt": ["ServiceTable", "Arn"]}
                dynamodb |= actions
            elif all(a.startswith("kms:") for a in actions):
                assert statement["Resource"] == {"Fn::GetAtt": ["TlsKeysKey", "Arn"]}
                kms |= actions
            else:  # the prod stage names no Route 53 zone: no route53 rights
                assert actions <= {
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                }, statement
                logs |= actions
        assert dynamodb == used[name], name
        assert logs, name
        assert kms == ({"kms:Decrypt", "kms:GenerateDataKey"} if name in seals else set())
    for function in ("APIHandler", "ApiKeyAuthorizer", "AcmeWorker"):
        role = resources[function]["Properties"]["Role"]["Fn::GetAtt"][0]
        assert role in roles


def test_the_acme_worker_is_a_scheduled_function_with_its_own_layer(prod_template):
    """acme and cryptography reach the worker (and the API's SSH certificate routes)
    through their layer, never the API's package;
    the API and the worker seal private keys with the stack's KMS key, the authorizer has
    no use for it."""
    _, template = prod_template
    resources = template["Resources"]
    worker = resources["AcmeWorker"]["Properties"]
    assert worker["Handler"] == "app.acme_worker"
    assert worker["Events"]["AcmeWorkerEvent"] == {
        "Type": "Schedule",
        "Properties": {"Schedule": "rate(1 minute)"},
    }
    assert worker["Timeout"] == 300
    assert worker["Layers"] == [{"Ref": "AcmeLayer"}]
    layer = resources["AcmeLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Properties"]["CompatibleRuntimes"] == [worker["Runtime"]]
    key = resources["TlsKeysKey"]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    for function in ("APIHandler", "AcmeWorker"):
        variables = resources[function]["Properties"]["Environment"]["Variables"]
        assert variables["TLS_KMS_KEY_ID"] == {"Ref": "TlsKeysKey"}
        assert variables["TABLE_NAME"] == "tunnel-service-prod"
    assert "TLS_KMS_KEY_ID" not in json.dumps(resources["ApiKeyAuthorizer"])
    # the API signs SSH certificates with the layer's cryptography (imported on first use:
    # test_package_is_slimmed_and_the_app_runs_from_it checks the cold start); the
    # authorizer has no use for it
    assert resources["APIHandler"]["Properties"]["Layers"] == [{"Ref": "AcmeLayer"}]
    assert "Layers" not in resources["ApiKeyAuthorizer"]["Properties"]


def test_a_stage_that_names_a_route53_zone_lets_the_worker_change_only_that_zone(monkeypatch):
    config = deploy_stack.load_config()
    config["stages"]["dev"]["environment_variables"]["DNS_ROUTE53_ZONE_ID"] = "Z0123456789"
    monkeypatch.setattr(deploy_stack, "load_config", lambda: config)
    role = deploy_stack.merge_template("dev")["Resources"]["AcmeWorkerRole"]
    zone = [s for s in _statements(role) if s["Sid"] == "ChallengeZone"]
    assert zone == [
        {
            "Sid": "ChallengeZone",
            "Effect": "Allow",
            "Action": ["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets"],
            "Resource": {"Fn::Sub": "arn:${AWS::Partition}:route53:::hostedzone/Z0123456789"},
        }
    ]
    api = deploy_stack.merge_template("dev")["Resources"]["ApiHandlerRole"]
    assert "route53" not in json.dumps(api)


def test_generated_chalice_files_are_up_to_date():
    stale = []
    for path, content in deploy_stack.generated_files().items():
        with open(path) as handle:
            if handle.read() != content:
                stale.append(os.path.relpath(path, PROJECT_DIR))
    assert not stale, f"run `python scripts/deploy_stack.py resources`: stale {stale}"


def test_stages_are_configured_for_least_privilege_and_their_tables():
    with open(os.path.join(PROJECT_DIR, ".chalice", "config.json")) as handle:
        config = json.load(handle)
    assert set(config["stages"]) == {"dev", "localstack", "prod"}
    names = set()
    for stage, settings in config["stages"].items():
        assert settings["autogen_policy"] is False
        assert settings["iam_policy_file"] == f"policy-{stage}.json"
        assert (
            settings["lambda_functions"]["api_key_authorizer"]["iam_policy_file"]
            == f"policy-authorizer-{stage}.json"
        )
        assert (
            settings["lambda_functions"]["acme_worker"]["iam_policy_file"]
            == f"policy-acme-worker-{stage}.json"
        )
        assert settings["api_gateway_stage"] == "api"
        assert settings["environment_variables"]["STAGE"] == stage
        merge = deploy_stack.merge_template(stage)
        table = merge["Resources"]["ServiceTable"]["Properties"]
        assert table["TableName"] == deploy_stack.table_name(stage)
        assert table["DeletionProtectionEnabled"] is (stage == "prod")
        assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
        names.add(table["TableName"])
        with open(os.path.join(PROJECT_DIR, ".chalice", f"policy-{stage}.json")) as handle:
            policy = json.load(handle)
        assert policy["Statement"][0]["Resource"].endswith(f":table/{table['TableName']}")
    assert len(names) == 3  # no two stages share a table


@pytest.mark.parametrize("stage", ["dev", "localstack"])
def test_other_stages_package_and_lint(stage, tmp_path):
    path = deploy_stack.package(stage, str(tmp_path))
    result = subprocess.run(
        [os.path.join(VENV_BIN, "cfn-lint"), "--", path],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ---- docker-compose.yml -------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose():
    with open(os.path.join(PROJECT_DIR, "docker-compose.yml")) as handle:
        return yaml.safe_load(handle)


def test_compose_file_matches_the_compose_spec_schema():
    """Validated against the compose spec's JSON schema that check-jsonschema vendors."""
    result = subprocess.run(
        [
            os.path.join(VENV_BIN, "check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            os.path.join(PROJECT_DIR, "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_starts_localstack_and_the_agent_on_loopback(compose):
    services = compose["services"]
    assert services["localstack"]["image"].startswith("localstack/localstack")
    agent = services["agent"]
    context = os.path.join(PROJECT_DIR, agent["build"]["context"])
    assert os.path.isfile(os.path.join(context, agent["build"].get("dockerfile", "Dockerfile")))
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    assert "127.0.0.1:4566:4566" in services["localstack"]["ports"]
    ports = [str(p) for p in agent["ports"]]
    assert ports == ["127.0.0.1:4040:4040"]  # tunnel traffic goes through the edge


# What the packaged app is run with in the test below: it compiles a traffic policy using the
# strings, math and encoders CEL extensions (enabled from cel.so, the ext modules left out),
# parses a CA certificate (asn1crypto) and checks inline JWKS (chalicelib/core/policy/jwks.py), with
# no cryptography or PyJWT anywhere on its path, and says where its modules came from.
_PACKAGED_CHECK = """
import json, sys
import app
assert app.app.routes
cold = sorted(m for m in sys.modules if m.split(".")[0] in ("asn1crypto", "cel_expr_python"))
from chalicelib.core.policy import compile_policy
compile_policy({"on_http_request": [{"expressions": [
    "req.url.path.upperAscii().split('/').size() > math.greatest(1, 2)",
    "base64.encode(bytes(req.url.path)) != ''"],
    "actions": [{"type": "deny"}]}]})
from chalicelib import certificate_authorities
from chalicelib.core import store
ca = certificate_authorities.parse_pem(sys.stdin.read())
from chalicelib.core.policy.document import PolicyError
def jwt_policy(jwks):
    return {"on_http_request": [{"actions": [{"type": "jwt-validation", "config": {
        "issuer": {"allow_list": [{"value": "https://issuer"}]},
        "audience": {"allow_list": [{"value": "api"}]},
        "http": {"tokens": [{"type": "jwt", "method": "header", "name": "Authorization",
                             "prefix": "Bearer "}]},
        "jws": {"allowed_algorithms": ["RS256", "ES256", "EdDSA"], "keys": {"jwks": jwks}}}}]}]}
compile_policy(jwt_policy(json.loads(sys.argv[1])))
try:
    compile_policy(jwt_policy({"keys": [{"kty": "EC", "crv": "P-256", "x": "AQ", "y": "AQ"}]}))
    off_curve = "accepted"
except PolicyError as exc:
    off_curve = str(exc)
import botocore, cel_expr_python.cel, asn1crypto
for name in ("cryptography", "jwt", "_cffi_backend"):
    try:
        __import__(name)
        print("importable:", name)
    except ImportError:
        pass
print(repr({"cold": cold, "cn": ca["subject_common_name"], "botocore": botocore.__file__,
            "off_curve": off_curve,
            "loaded": sorted(m for m in sys.modules
                             if m.split(".")[0] in ("cffi", "pycparser", "cryptography", "jwt")),
            "cel": cel_expr_python.cel.__file__, "asn1crypto": asn1crypto.__file__,
            "store_cached": store.__cached__}))
"""


def _jwks():
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    keys = [
        jwt.algorithms.RSAAlgorithm.to_jwk(rsa.generate_private_key(65537, 2048).public_key()),
        jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key()),
        jwt.algorithms.OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate().public_key()),
    ]
    return json.dumps({"keys": [json.loads(key) for key in keys]})


def _ca_pem():
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Packaged CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_package_is_slimmed_and_the_app_runs_from_it(tmp_path):
    """The package (scripts/deploy_stack.py slim_package) leaves out what the Lambda
    Python runtime provides (botocore and its dependencies), the CEL ext modules (the
    extensions are enabled from cel.so), PyYAML's unused libyaml binding and type stubs;
    its shared objects are stripped and every module has unchecked-hash bytecode (the
    Lambda's code folder is read-only). The app imports from it with only the runtime's
    packages added, without loading the certificate parser or CEL at cold start; its policy
    engine (inline JWKS included) and certificate parsing work from the package's own copies,
    and neither cryptography nor PyJWT is in it or importable."""
    import ast
    import importlib.util
    import site
    import zipfile

    deploy_stack.package("prod", str(tmp_path / "out"))
    archive = tmp_path / "out" / "deployment.zip"
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        tops = {name.split("/")[0] for name in names}
        sdk = sum(
            i.compress_size
            for i in zf.infolist()
            if i.filename.split("/")[0] in deploy_stack.RUNTIME_PROVIDED
        )
        store_pyc = zf.read(
            f"chalicelib/core/__pycache__/store.{sys.implementation.cache_tag}.pyc"
        )
        zf.extractall(tmp_path / "task")
    assert sdk == 0 and not tops & set(deploy_stack.RUNTIME_PROVIDED)
    assert {"pynamodb", "chalicelib", "cel_expr_python", "asn1crypto"} <= tops
    assert not tops & {"cryptography", "jwt", "cffi", "pycparser", "acme", "josepy"}
    assert not [
        n
        for n in names
        if n.startswith(("asn1crypto/cms.", "asn1crypto/tsp.", "asn1crypto/__pycache__/cms."))
    ]
    assert not [
        n
        for n in names
        if n.startswith(("cel_expr_python/ext/", "yaml/_yaml.", "_cffi_backend."))
        or n.endswith(".pyi")
    ]
    sources = [n for n in names if n.endswith(".py")]
    pycs = {n for n in names if n.endswith(".pyc")}
    missing = [n for n in sources if importlib.util.cache_from_source(n) not in pycs]
    assert missing == []
    assert store_pyc[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(store_pyc[4:8], "little") == 0b01  # hash-based, source not checked
    for name in ("cel_expr_python/cel.", "_re2."):
        so = next(tmp_path / "task" / n for n in names if n.startswith(name))
        sections = subprocess.run(
            ["readelf", "-S", str(so)], capture_output=True, text=True, check=True
        ).stdout
        assert ".symtab" not in sections, so
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    packages = site.getsitepackages()[0]
    for name in ("botocore", "dateutil", "urllib3", "jmespath", "six.py"):
        os.symlink(os.path.join(packages, name), runtime / name)
    result = subprocess.run(
        [
            sys.executable,
            "-P",  # with -S and this environment: nothing but the package and the runtime
            "-S",
            "-B",
            "-c",
            _PACKAGED_CHECK,
            _jwks(),
        ],
        input=_ca_pem(),
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ.get("PATH", ""),
            "AWS_DEFAULT_REGION": "us-east-1",
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "task"), str(runtime)]),
        },
    )
    assert result.returncode == 0, result.stderr
    seen = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert seen["cold"] == [] and seen["cn"] == "Packaged CA"
    assert "importable" not in result.stdout, result.stdout
    from chalicelib.core.policy.document import PolicyError
    from chalicelib.core.policy import compile_policy

    with pytest.raises(PolicyError) as here:  # the same JWKS, refused the same way here
        compile_policy(
            {
                "on_http_request": [
                    {
                        "actions": [
                            {
                                "type": "jwt-validation",
                                "config": {
                                    "issuer": {"allow_list": [{"value": "https://issuer"}]},
                                    "audience": {"allow_list": [{"value": "api"}]},
                                    "http": {
                                        "tokens": [
                                            {
                                                "type": "jwt",
                                                "method": "header",
                                                "name": "Authorization",
                                                "prefix": "Bearer ",
                                            }
                                        ]
                                    },
                                    "jws": {
                                        "allowed_algorithms": ["ES256"],
                                        "keys": {
                                            "jwks": {
                                                "keys": [
                                                    {
                                                        "kty": "EC",
                                                        "crv": "P-256",
                                                        "x": "AQ",
                                                        "y": "AQ",
                                                    }
                                                ]
                                            }
                                        },
                                    },
                                },
                            }
                        ]
                    }
                ]
            }
        )
    assert seen["off_curve"] == str(here.value) and "P-256" in seen["off_curve"]
    assert seen["loaded"] == []
    assert seen["botocore"].startswith(str(runtime))
    for name in ("cel", "asn1crypto", "store_cached"):
        assert seen[name].startswith(str(tmp_path / "task")), seen


def test_compose_runs_the_agent_against_the_edge_with_a_credential_made_once(compose):
    services = compose["services"]
    agent, once = services["agent"], services["agent-credential"]
    assert agent["environment"]["AGENT_SERVER_ADDR"] == "edge:4443"
    assert "edge" in services["edge"]["environment"]["EDGE_AGENT_HOSTNAMES"].split(",")
    assert agent["depends_on"]["agent-credential"]["condition"] == "service_completed_successfully"
    assert once["entrypoint"] == ["python", "-m", "tunnel_agent.credential"]
    assert once["restart"] == "no"
    token_file = agent["environment"]["AGENT_AUTHTOKEN_FILE"]
    assert once["environment"]["AGENT_AUTHTOKEN_FILE"] == token_file
    secrets = {v.split(":")[0]: v.split(":")[1] for v in agent["volumes"] + once["volumes"]}
    assert secrets["agent-secrets"] == os.path.dirname(token_file)
    ca_volume = [v for v in agent["volumes"] if v.startswith("edge-data:")][0]
    assert agent["environment"]["AGENT_ROOT_CAS"].startswith(ca_volume.split(":")[1] + "/")
    assert once["image"] == agent["image"] and once["build"] == agent["build"]
