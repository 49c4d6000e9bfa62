"""Package and deploy the service as one CloudFormation stack (AWS or LocalStack).

Commands (``python scripts/deploy_stack.py <command> --help``):

  resources [--stage S|--all]   write .chalice/resources-<stage>.json, the template that
                                ``chalice package --merge-template`` merges into Chalice's
  package --stage S --out DIR   chalice package with that merge template (DIR/sam.json +
                                DIR/deployment.zip)
  deploy --stage S [--localstack] [--bucket B] [--stack-name N] [--no-bootstrap]
                                package, upload the code to S3, create or update the stack,
                                wait, print the API's URL, and bootstrap a first account
                                (its admin API key is printed once)

What the merge template adds to Chalice's template (RestAPI, APIHandler, ApiKeyAuthorizer,
their roles and permissions):

- ``ServiceTable``: the one DynamoDB table (``pk``/``sk`` strings, on-demand billing,
  point-in-time recovery, TTL on ``expires_at``). Its name is the stage's TABLE_NAME from .chalice/config.json (the
  default ``tunnel-service`` when the stage sets none). In ``prod`` it has deletion
  protection and DeletionPolicy/UpdateReplacePolicy ``Retain``.
- Gateway responses on the RestAPI that give API Gateway's own answers (no route, no or bad
  API key, authorizer failure, too large, wrong media type) the contract's error body. The
  codes and messages come from chalicelib.gateway / chalicelib.core.errors, the local twin that
  ``make run`` and the tests use, so the two cannot drift apart.
- Least privilege: the policies of the two function roles are replaced by ones that allow
  only the DynamoDB actions the code uses on that table (``Fn::GetAtt ServiceTable.Arn``)
  plus writing their own logs. The authorizer may only GetItem. (.chalice/policy-*.json say
  the same for ``chalice deploy`` users; a test keeps them in step.)

Deploying needs only boto3 (no AWS CLI, no SAM CLI): LocalStack through ``localstack-client``
at http://localhost:4566 (LOCALSTACK_ENDPOINT overrides), AWS through the usual credential
chain (AWS_PROFILE, AWS_REGION/AWS_DEFAULT_REGION).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any, Dict, List, Optional

from scripts import dashboard_site  # the dashboard as a static site (docs/DASHBOARD.md)

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHALICE_DIR = os.path.join(PROJECT_DIR, ".chalice")

DEFAULT_TABLE_NAME = "tunnel-service"  # chalicelib.core.config's default (stage dev sets none)
TABLE_RESOURCE = "ServiceTable"
API_RESOURCE = "RestAPI"
API_FUNCTION = "APIHandler"
API_ROLE = "ApiHandlerRole"
AUTHORIZER_ROLE = "ApiKeyAuthorizerRole"
# The ACME worker: app.py's scheduled function `acme_worker`, with its own role and a layer
# holding acme and cryptography (the API's package leaves them out: docs/CERTIFICATES.md).
WORKER_FUNCTION = "AcmeWorker"
WORKER_ROLE = "AcmeWorkerRole"
ACME_LAYER = "AcmeLayer"
LAYER_ZIP = "acme-layer.zip"
LAYER_REQUIREMENTS = os.path.join(PROJECT_DIR, "requirements-acme-layer.txt")
LAYER_PLATFORM = "manylinux2014_x86_64"  # the python3.11 runtime: Amazon Linux 2, glibc 2.26
# The KMS key that seals certificates' private keys (chalicelib.core.keywrap, TLS_KMS_KEY_ID):
# the API seals uploaded ones, the worker issued ones, the edge opens them.
KMS_KEY = "TlsKeysKey"
KMS_ACTIONS = ["kms:Decrypt", "kms:GenerateDataKey"]
ROUTE53_ACTIONS = ["route53:ChangeResourceRecordSets", "route53:ListResourceRecordSets"]

# Every DynamoDB action the service's code performs (chalicelib.core.store through PynamoDB:
# GetItem, Query, TransactWriteItems with Put/Update/Delete/ConditionCheck, DescribeTable
# from Model.exists; PutItem/UpdateItem/DeleteItem for single-item writes; BatchGetItem for the
# sessions of a page of online tunnels/endpoints, chalicelib.core.online).
API_ACTIONS = sorted(
    [
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
        "dynamodb:TransactWriteItems",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DescribeTable",
        "dynamodb:BatchGetItem",
    ]
)
# chalicelib.auth.resolve: two GetItems (the key's lookup item and its owner).
AUTHORIZER_ACTIONS = ["dynamodb:GetItem"]
LOG_ACTIONS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
# API Gateway stage throttling (requests per second, steady and burst), for the whole API.
THROTTLE_RATE_LIMIT = 100
THROTTLE_BURST_LIMIT = 200


def load_config() -> Dict[str, Any]:
    with open(os.path.join(CHALICE_DIR, "config.json")) as handle:
        return json.load(handle)


def stages() -> List[str]:
    return sorted(load_config()["stages"])


def table_name(stage: str) -> str:
    return stage_env(stage).get("TABLE_NAME", DEFAULT_TABLE_NAME)


# ---- the merge template ------------------------------------------------------------------
def gateway_responses() -> Dict[str, Dict[str, Any]]:
    """API Gateway response type → (status, error code, message), as chalicelib.gateway answers.

    MISSING_AUTHENTICATION_TOKEN is what API Gateway sends for a path (or method) it has no
    route for, INCOMPLETE_SIGNATURE the same when the request carries an Authorization header:
    both are the contract's 404. DEFAULT_4XX/5XX catch every other gateway-made error.
    THROTTLED/QUOTA_EXCEEDED are 429 (API Gateway's default 4XX would make them a 400).
    """
    from chalicelib import gateway
    from chalicelib.core import errors

    table = {
        "UNAUTHORIZED": (401, errors.UNAUTHORIZED, gateway.UNAUTHORIZED_MSG),
        "ACCESS_DENIED": (403, errors.Forbidden.error_code, errors.Forbidden.default_msg),
        "MISSING_AUTHENTICATION_TOKEN": (404, errors.NOT_FOUND, gateway.NOT_FOUND_MSG),
        "INCOMPLETE_SIGNATURE": (404, errors.NOT_FOUND, gateway.NOT_FOUND_MSG),
        # The stage's throttling (THROTTLE_* below) and usage-plan quotas: 429, as the
        # service's own per-account limiter answers (chalicelib.ratelimit).
        "THROTTLED": (429, errors.RATE_LIMITED, gateway.THROTTLED_MSG),
        "QUOTA_EXCEEDED": (429, errors.RATE_LIMITED, gateway.THROTTLED_MSG),
        "AUTHORIZER_FAILURE": (500, errors.Internal.error_code, errors.Internal.default_msg),
        "AUTHORIZER_CONFIGURATION_ERROR": (
            500,
            errors.Internal.error_code,
            errors.Internal.default_msg,
        ),
        "REQUEST_TOO_LARGE": (
            413,
            errors.PayloadTooLarge.error_code,
            errors.PayloadTooLarge.default_msg,
        ),
        "UNSUPPORTED_MEDIA_TYPE": (
            415,
            errors.UnsupportedMediaType.error_code,
            errors.UnsupportedMediaType.default_msg,
        ),
        "DEFAULT_4XX": (400, errors.BadRequest.error_code, errors.BadRequest.default_msg),
        "DEFAULT_5XX": (500, errors.Internal.error_code, errors.Internal.default_msg),
    }
    return {
        name: {"status": status, "error_code": code, "msg": msg}
        for name, (status, code, msg) in table.items()
    }


def error_template(status: int, error_code: str, msg: str) -> str:
    """The contract's error body as an API Gateway (non-VTL) template."""
    body = json.dumps(
        {
            "error_code": error_code,
            "status_code": status,
            "msg": msg,
            "details": {"operation_id": "op_$context.requestId"},
        }
    )
    # The template language has no escapes: a message must not carry "$" of its own.
    assert body.count("$") == 1, body
    return body


def _gateway_response_resource(response_type: str, spec: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "Type": "AWS::ApiGateway::GatewayResponse",
        "Properties": {
            "RestApiId": {"Ref": API_RESOURCE},
            "ResponseType": response_type,
            "StatusCode": str(spec["status"]),
            "ResponseParameters": {"gatewayresponse.header.Content-Type": "'application/json'"},
            "ResponseTemplates": {
                "application/json": error_template(spec["status"], spec["error_code"], spec["msg"])
            },
        },
    }


def _role_policies(
    name: str, actions: List[str], more: Optional[List[Dict[str, Any]]] = None
) -> List[Dict[str, Any]]:
    return [
        {
            "PolicyName": name,
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "ServiceTable",
                        "Effect": "Allow",
                        "Action": actions,
                        "Resource": {"Fn::GetAtt": [TABLE_RESOURCE, "Arn"]},
                    },
                    {
                        "Sid": "OwnLogs",
                        "Effect": "Allow",
                        "Action": LOG_ACTIONS,
                        "Resource": {
                            "Fn::Sub": "arn:${AWS::Partition}:logs:${AWS::Region}:"
                            "${AWS::AccountId}:*"
                        },
                    },
                    *(more or []),
                ],
            },
        }
    ]


def stage_env(stage: str) -> Dict[str, str]:
    config = load_config()
    env = dict(config.get("environment_variables", {}))
    env.update(config["stages"][stage].get("environment_variables", {}))
    return env


def _kms_statement() -> Dict[str, Any]:
    return {
        "Sid": "SealedKeys",
        "Effect": "Allow",
        "Action": KMS_ACTIONS,
        "Resource": {"Fn::GetAtt": [KMS_KEY, "Arn"]},
    }


def _worker_statements(stage: str) -> List[Dict[str, Any]]:
    """The worker's rights beyond the table: the sealing key, and the Route 53 zone it
    publishes DNS-01 answers in when the stage names one (DNS_ROUTE53_ZONE_ID)."""
    statements = [_kms_statement()]
    zone = stage_env(stage).get("DNS_ROUTE53_ZONE_ID")
    if zone:
        statements.append(
            {
                "Sid": "ChallengeZone",
                "Effect": "Allow",
                "Action": ROUTE53_ACTIONS,
                "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:route53:::hostedzone/{zone}"},
            }
        )
    return statements


def merge_template(stage: str) -> Dict[str, Any]:
    prod = stage == "prod"
    table: Dict[str, Any] = {
        "Type": "AWS::DynamoDB::Table",
        "DeletionPolicy": "Retain" if prod else "Delete",
        "UpdateReplacePolicy": "Retain" if prod else "Delete",
        "Properties": {
            "TableName": table_name(stage),
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            # online items of an edge that died, idempotency records and rate-limit windows expire
            # (chalicelib.core.online, chalicelib.core.store)
            "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "DeletionProtectionEnabled": prod,
            "Tags": [{"Key": "aws-chalice", "Value": f"stage={stage}:app=tunnel-service"}],
        },
    }
    resources: Dict[str, Any] = {TABLE_RESOURCE: table}
    for response_type, spec in gateway_responses().items():
        logical = "GatewayResponse" + "".join(p.title() for p in response_type.split("_"))
        resources[logical] = _gateway_response_resource(response_type, spec)
    # Stage-wide throttling: a backstop in front of the per-account limiter
    # (RATE_LIMIT_PER_MINUTE in the Lambda's environment); API Gateway answers over it with the
    # THROTTLED gateway response above.
    resources[API_RESOURCE] = {
        "Properties": {
            "MethodSettings": [
                {
                    "ResourcePath": "/*",
                    "HttpMethod": "*",
                    "ThrottlingRateLimit": THROTTLE_RATE_LIMIT,
                    "ThrottlingBurstLimit": THROTTLE_BURST_LIMIT,
                }
            ]
        }
    }
    resources[API_ROLE] = {
        "Properties": {
            "Policies": _role_policies("ApiHandlerTableAccess", API_ACTIONS, [_kms_statement()])
        }
    }
    resources[AUTHORIZER_ROLE] = {
        "Properties": {
            "Policies": _role_policies("ApiKeyAuthorizerTableAccess", AUTHORIZER_ACTIONS)
        }
    }
    # The key that seals private keys: rotated yearly, administered by the account (IAM
    # policies grant its use: the two statements above and below; the edge's task role too).
    resources[KMS_KEY] = {
        "Type": "AWS::KMS::Key",
        "DeletionPolicy": "Retain" if prod else "Delete",
        "UpdateReplacePolicy": "Retain" if prod else "Delete",
        "Properties": {
            "Description": f"tunnel-service {stage}: seals TLS certificates' private keys",
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Sid": "AccountAdministers",
                        "Effect": "Allow",
                        "Principal": {
                            "AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}
                        },
                        "Action": "kms:*",
                        "Resource": "*",
                    }
                ],
            },
        },
    }
    sealing = {"Environment": {"Variables": {"TLS_KMS_KEY_ID": {"Ref": KMS_KEY}}}}
    # The API function gets the layer too: signing SSH certificates (chalicelib/
    # ssh_certificates.py) imports cryptography from it, on first use only, so no other route
    # loads it at cold start (tests/functional/test_packaging.py).
    resources[API_FUNCTION] = {"Properties": {**sealing, "Layers": [{"Ref": ACME_LAYER}]}}
    # The worker: its layer (acme, cryptography; build_acme_layer) and its role.
    resources[ACME_LAYER] = {
        "Type": "AWS::Serverless::LayerVersion",
        "Properties": {
            "ContentUri": f"./{LAYER_ZIP}",
            "CompatibleRuntimes": ["python3.11"],
            "Description": "acme and cryptography for the ACME worker and the API's SSH "
            "certificates",
            "RetentionPolicy": "Delete",
        },
    }
    resources[WORKER_FUNCTION] = {"Properties": {**sealing, "Layers": [{"Ref": ACME_LAYER}]}}
    resources[WORKER_ROLE] = {
        "Properties": {
            "Policies": _role_policies("AcmeWorkerAccess", API_ACTIONS, _worker_statements(stage))
        }
    }
    return {
        "Resources": resources,
        "Outputs": {
            "TableName": {"Value": {"Ref": TABLE_RESOURCE}},
            "TableArn": {"Value": {"Fn::GetAtt": [TABLE_RESOURCE, "Arn"]}},
            "TlsKeysKeyArn": {"Value": {"Fn::GetAtt": [KMS_KEY, "Arn"]}},
        },
    }


def resources_path(stage: str) -> str:
    return os.path.join(CHALICE_DIR, f"resources-{stage}.json")


def render_resources(stage: str) -> str:
    return json.dumps(merge_template(stage), indent=2) + "\n"


def policy_document(stage: str, actions: List[str]) -> Dict[str, Any]:
    """The .chalice/policy-*.json content (for ``chalice deploy``): same actions, by name."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ServiceTable",
                "Effect": "Allow",
                "Action": actions,
                "Resource": f"arn:aws:dynamodb:*:*:table/{table_name(stage)}",
            },
            {
                "Sid": "OwnLogs",
                "Effect": "Allow",
                "Action": LOG_ACTIONS,
                "Resource": "arn:aws:logs:*:*:*",
            },
        ],
    }


def generated_files() -> Dict[str, str]:
    """Every file this script generates into .chalice/, path → content."""
    files = {}
    for stage in stages():
        files[resources_path(stage)] = render_resources(stage)
        files[os.path.join(CHALICE_DIR, f"policy-{stage}.json")] = (
            json.dumps(policy_document(stage, API_ACTIONS), indent=2) + "\n"
        )
        files[os.path.join(CHALICE_DIR, f"policy-authorizer-{stage}.json")] = (
            json.dumps(policy_document(stage, AUTHORIZER_ACTIONS), indent=2) + "\n"
        )
        files[os.path.join(CHALICE_DIR, f"policy-acme-worker-{stage}.json")] = (
            json.dumps(policy_document(stage, API_ACTIONS), indent=2) + "\n"
        )
    return files


def write_generated() -> List[str]:
    written = []
    for path, content in generated_files().items():
        with open(path, "w") as handle:
            handle.write(content)
        written.append(os.path.relpath(path, PROJECT_DIR))
    return written


# ---- package -----------------------------------------------------------------------------
# What the AWS Lambda Python runtime already provides (the AWS SDK and its dependencies):
# bundling them again made 16 of the package's 18.4 MB. Measured with `make bench`.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py")
# Files of the bundled wheels the service never loads: PyYAML's libyaml binding (the policy
# parser uses yaml.safe_load, the pure-Python SafeLoader); type stubs. (cryptography, PyJWT,
# cffi and pycparser are no longer in the Lambda's requirements at all: the API parses CA
# certificates with asn1crypto and checks inline JWKS in pure Python.) And asn1crypto's
# modules that its x509 (all the API parses with) never imports, found by an import trace of
# the app from the package (every chalicelib module, a policy compiled, a CA parsed): cms,
# crl, csr, ocsp, pdf, pkcs12, tsp, and _inet (util imports it on Windows only); 60 kB zipped
# with their bytecode. tests/functional/test_packaging.py parses a CA from the package.
LEAVE_OUT_PREFIXES = ("yaml/_yaml.",) + tuple(
    f"asn1crypto/{module}.py"
    for module in ("cms", "crl", "csr", "ocsp", "pdf", "pkcs12", "tsp", "_inet")
)
LEAVE_OUT_SUFFIXES = (".pyi",)
ZIP_LEVEL = 9  # deflate's best: what Lambda unzips once per cold start, smaller to upload
LAST_STRIP: Dict[str, int] = {}
LAST_SLIM: Dict[str, Any] = {}


def _runtime_provided(top: str) -> Optional[str]:
    """The key slim_package counts ``top`` (a zip member's first part) under when the Lambda
    runtime provides it, else None."""
    names = tuple(n.replace(".py", "") for n in RUNTIME_PROVIDED)
    base = top.split("-")[0].replace(".py", "").lower()
    if top in RUNTIME_PROVIDED:
        return top
    if top.endswith((".dist-info", ".data")) and base in ("python_dateutil",) + names:
        return base + " (dist-info)"
    return None


def _strip_elf(data: bytes, tool: str) -> bytes:
    """``data`` (a shared object) without its symbol tables (``strip --strip-unneeded``)."""
    with tempfile.NamedTemporaryFile(suffix=".so") as handle:
        handle.write(data)
        handle.flush()
        subprocess.run([tool, "--strip-unneeded", handle.name], check=True)
        with open(handle.name, "rb") as stripped:
            return stripped.read()


def _bytecode(name: str, source: bytes, scratch: str) -> Optional[bytes]:
    """The .pyc of ``source`` for this interpreter, as an unchecked-hash pyc (used without
    looking at the source's mtime: the package never changes once deployed); None when the
    source does not compile (it then fails, or not, as it would without the pyc)."""
    import py_compile

    path, cfile = os.path.join(scratch, "module.py"), os.path.join(scratch, "module.pyc")
    with open(path, "wb") as handle:
        handle.write(source)
    try:
        py_compile.compile(
            path,
            cfile=cfile,
            dfile=name,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    except py_compile.PyCompileError:
        return None
    with open(cfile, "rb") as handle:
        return handle.read()


def slim_package(zip_path: str, strip: bool = True, bytecode: bool = True) -> Dict[str, Any]:
    """Rewrite the deployment zip for the Lambda (every choice measured by `make
    bench`): without what the runtime provides (RUNTIME_PROVIDED) or what the service never
    loads (LEAVE_OUT_*), with shared objects stripped of their symbol tables (binutils'
    ``strip`` when installed), with the local ``__pycache__`` folders replaced by bytecode
    compiled here for every module (``bytecode``: the Lambda's code folder is read-only, so
    without it every cold start compiles every module it imports: about 100 ms of 250 ms
    for `import app`, measured). Bytecode is only added when this interpreter's version is the
    one chalice packaged for (it always is: chalice takes the runtime from it).
    Returns what it did (bytes are compressed sizes)."""
    removed: Dict[str, int] = {}
    left_out: Dict[str, int] = {}
    tool = shutil.which("strip") if strip else None
    stripped_bytes = 0
    pyc_bytes = 0
    cache_tag = sys.implementation.cache_tag
    slimmed = zip_path + ".tmp"
    with (
        tempfile.TemporaryDirectory(prefix="slim-") as scratch,
        zipfile.ZipFile(zip_path) as source,
        zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            name = info.filename
            key = _runtime_provided(name.split("/")[0])
            if key is not None:
                removed[key] = removed.get(key, 0) + info.compress_size
                continue
            if bytecode and "/__pycache__/" in "/" + name:
                left_out["__pycache__ (local)"] = (
                    left_out.get("__pycache__ (local)", 0) + info.compress_size
                )
                continue
            if name.startswith(LEAVE_OUT_PREFIXES) or name.endswith(LEAVE_OUT_SUFFIXES):
                left_out[name] = info.compress_size
                continue
            data = source.read(name)
            if tool and (name.endswith(".so") or ".so." in name) and data[:4] == b"\x7fELF":
                before = len(data)
                data = _strip_elf(data, tool)
                stripped_bytes += before - len(data)
            target.writestr(info, data, compresslevel=ZIP_LEVEL)
            if bytecode and name.endswith(".py"):
                folder, _, module = name.rpartition("/")
                pyc_name = (
                    f"{folder}/" if folder else ""
                ) + f"__pycache__/{module[:-3]}.{cache_tag}.pyc"
                pyc = _bytecode(name, data, scratch)
                if pyc is not None:
                    pyc_info = zipfile.ZipInfo(pyc_name, date_time=info.date_time)
                    pyc_info.external_attr = info.external_attr
                    pyc_info.compress_type = zipfile.ZIP_DEFLATED
                    target.writestr(pyc_info, pyc, compresslevel=ZIP_LEVEL)
                    pyc_bytes += target.getinfo(pyc_name).compress_size
    os.replace(slimmed, zip_path)
    result = {
        "removed_runtime_packages": removed,
        "left_out": left_out,
        "strip": tool is not None,
        "stripped_bytes_uncompressed": stripped_bytes,
        "bytecode_bytes": pyc_bytes,
    }
    LAST_STRIP.clear()
    LAST_STRIP.update(removed)
    LAST_SLIM.clear()
    LAST_SLIM.update(result)
    return result


def package(stage: str, out_dir: str) -> str:
    """``chalice package`` with the stage's merge template, then slimmed for the Lambda
    (slim_package); the path of the template."""
    env = dict(os.environ)
    env.setdefault("AWS_DEFAULT_REGION", env.get("AWS_REGION", "us-east-1"))
    merge = resources_path(stage)
    # vendor/ as scripts/vendor_lambda.py makes it now (a no-op when it already is: a
    # checkout vendored before the slimming would otherwise ship the CEL ext modules).
    from scripts import vendor_lambda

    vendor_lambda.main()
    with open(merge) as handle:
        if handle.read() != render_resources(stage):
            raise SystemExit(
                f"{os.path.relpath(merge, PROJECT_DIR)} is out of date: run "
                "`python scripts/deploy_stack.py resources`"
            )
    chalice = os.path.join(os.path.dirname(sys.executable), "chalice")
    cmd = [
        chalice if os.path.exists(chalice) else "chalice",
        "package",
        "--stage",
        stage,
        "--merge-template",
        merge,
        out_dir,
    ]
    result = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise SystemExit(f"chalice package failed:\n{output}")
    if "Could not install dependencies" in output:
        # The Lambda would start without them: refuse rather than deploy a broken function.
        raise SystemExit(f"chalice package could not bundle every dependency:\n{output}")
    with open(os.path.join(out_dir, "sam.json")) as handle:
        runtimes = {
            r.get("Properties", {}).get("Runtime") for r in json.load(handle)["Resources"].values()
        } - {None}
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    slim_package(os.path.join(out_dir, "deployment.zip"), bytecode=runtimes == {here})
    build_acme_layer(os.path.join(out_dir, LAYER_ZIP))
    return os.path.join(out_dir, "sam.json")


def build_acme_layer(zip_path: str) -> Dict[str, Any]:
    """The ACME worker's layer: requirements-acme-layer.txt as manylinux2014 wheels for the
    python3.11 runtime (pip, --no-deps: the file pins every package), under ``python/`` as
    Lambda layers are laid out, without bytecode caches or type stubs. Returns
    ``{"packages": [...], "bytes": size}``."""
    with tempfile.TemporaryDirectory(prefix="acme-layer-") as scratch:
        target = os.path.join(scratch, "python")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--only-binary=:all:",
            "--platform",
            LAYER_PLATFORM,
            "--implementation",
            "cp",
            "--python-version",
            "3.11",
            "--target",
            target,
            "-r",
            LAYER_REQUIREMENTS,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"the ACME layer could not be built:\n{result.stderr}")
        packages = []
        with zipfile.ZipFile(
            zip_path, "w", zipfile.ZIP_DEFLATED, compresslevel=ZIP_LEVEL
        ) as layer:
            for folder, dirs, files in os.walk(target):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(LEAVE_OUT_SUFFIXES):
                        continue
                    path = os.path.join(folder, name)
                    layer.write(path, os.path.relpath(path, scratch))
        for entry in sorted(os.listdir(target)):
            if entry.endswith(".dist-info"):
                packages.append(entry[: -len(".dist-info")])
    return {"packages": packages, "bytes": os.path.getsize(zip_path)}


# ---- deploy ------------------------------------------------------------------------------
def _session(localstack: bool, region: str):
    if localstack:
        import localstack_client.session

        endpoint = os.environ.get("LOCALSTACK_ENDPOINT", "http://localhost:4566")
        os.environ.setdefault("LOCALSTACK_HOST", endpoint.split("://", 1)[-1].split(":")[0])
        return localstack_client.session.Session(region_name=region), endpoint
    import boto3

    return boto3.session.Session(region_name=region), None


def deploy(
    stage: str,
    localstack: bool,
    bucket: Optional[str],
    stack_name: Optional[str],
    bootstrap: bool,
    out_dir: str,
) -> Dict[str, str]:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    os.environ["AWS_DEFAULT_REGION"] = region
    if localstack:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    session, endpoint = _session(localstack, region)
    stack_name = stack_name or f"tunnel-service-{stage}"
    print(f"1/5 chalice package --stage {stage} → {out_dir}", flush=True)
    template_path = package(stage, out_dir)

    s3 = session.client("s3")
    account = session.client("sts").get_caller_identity()["Account"]
    if not bucket:
        bucket = f"tunnel-service-artifacts-{account}-{region}"
    # the dashboard's static site: its origin is told to the API (CORS) before the deploy
    site_bucket = dashboard_site.bucket_name(stage, account, region)
    site_origin = dashboard_site.origin(site_bucket, region, endpoint)
    print(f"2/5 uploading the code to s3://{bucket}", flush=True)
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - missing (404) or not ours (403): try to create it
        kwargs = {"Bucket": bucket}
        if region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        s3.create_bucket(**kwargs)
    zip_path = os.path.join(out_dir, "deployment.zip")
    key = f"{stack_name}/deployment-{int(time.time())}.zip"
    s3.upload_file(zip_path, bucket, key)
    with open(template_path) as handle:
        template = json.load(handle)
    layer_key = f"{stack_name}/acme-layer-{int(time.time())}.zip"
    s3.upload_file(os.path.join(out_dir, LAYER_ZIP), bucket, layer_key)
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = f"s3://{bucket}/{key}"
        elif resource["Type"] == "AWS::Serverless::LayerVersion":
            resource["Properties"]["ContentUri"] = f"s3://{bucket}/{layer_key}"
    dashboard_site.with_dashboard_origin(template, site_origin)
    body_key = f"{stack_name}/template-{int(time.time())}.json"
    s3.put_object(Bucket=bucket, Key=body_key, Body=json.dumps(template).encode())
    template_url = (
        f"{endpoint}/{bucket}/{body_key}"
        if endpoint
        else f"https://{bucket}.s3.{region}.amazonaws.com/{body_key}"
    )

    cfn = session.client("cloudformation")
    print(f"3/5 deploying stack {stack_name} (change set)", flush=True)
    exists = True
    try:
        status = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"]
        exists = status != "REVIEW_IN_PROGRESS"
    except cfn.exceptions.ClientError:
        exists = False
    change_set = f"deploy-{int(time.time())}"
    cfn.create_change_set(
        StackName=stack_name,
        ChangeSetName=change_set,
        TemplateURL=template_url,
        ChangeSetType="UPDATE" if exists else "CREATE",
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    try:
        cfn.get_waiter("change_set_create_complete").wait(
            StackName=stack_name,
            ChangeSetName=change_set,
            WaiterConfig={"Delay": 3, "MaxAttempts": 200},
        )
    except Exception:  # noqa: BLE001 - "no changes" ends here too
        described = cfn.describe_change_set(StackName=stack_name, ChangeSetName=change_set)
        reason = described.get("StatusReason", "")
        if "didn't contain changes" not in reason and "No updates" not in reason:
            raise SystemExit(f"change set failed: {reason}")
        print("    no changes", flush=True)
    else:
        cfn.execute_change_set(StackName=stack_name, ChangeSetName=change_set)
        waiter = "stack_update_complete" if exists else "stack_create_complete"
        cfn.get_waiter(waiter).wait(
            StackName=stack_name, WaiterConfig={"Delay": 5, "MaxAttempts": 360}
        )
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in cfn.describe_stacks(StackName=stack_name)["Stacks"][0].get("Outputs", [])
    }
    url = outputs.get("EndpointURL", "")
    if localstack and outputs.get("RestAPIId"):
        url = f"{endpoint}/restapis/{outputs['RestAPIId']}/api/_user_request_"
    print(f"4/5 stack ready: API {url}  table {outputs.get('TableName')}", flush=True)
    result = {"stack": stack_name, "url": url.rstrip("/"), "table": outputs.get("TableName", "")}
    result["dashboard"] = dashboard_site.publish(s3, site_bucket, region, result["url"], endpoint)
    print(f"    dashboard: {result['dashboard']} (CORS for {site_origin})", flush=True)
    if bootstrap:
        print("5/5 bootstrapping an account (admin API key below, shown only now)", flush=True)
        env = dict(os.environ, TABLE_NAME=result["table"], AWS_DEFAULT_REGION=region)
        if endpoint:
            env["DYNAMODB_ENDPOINT_URL"] = endpoint
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "chalicelib.admin",
                "bootstrap",
                "--json",
                "--name",
                f"{stage}-first-account",
            ],
            cwd=PROJECT_DIR,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        admin = json.loads(out)
        result.update(account_id=admin["account_id"], api_key=admin["token"])
        print(f"    account {admin['account_id']}\n{admin['token']}", flush=True)
        print(
            "\nTry it:\n  curl -H 'Service-Version: 2' -H \"Authorization: Bearer $KEY\" "
            f"{result['url']}/api_keys\nIntegration suite against it:\n"
            f"  INTEGRATION_BASE_URL={result['url']} INTEGRATION_API_KEY=<key> "
            "make test-integration",
            flush=True,
        )
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/deploy_stack.py", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("resources", help="(re)write .chalice/resources-*.json and policy-*.json")
    pkg = sub.add_parser("package", help="chalice package with the merge template")
    pkg.add_argument("--stage", required=True, choices=stages())
    pkg.add_argument("--out", required=True)
    dep = sub.add_parser("deploy", help="package, upload and create/update the stack")
    dep.add_argument("--stage", required=True, choices=stages())
    dep.add_argument(
        "--localstack", action="store_true", help="deploy to LocalStack (http://localhost:4566)"
    )
    dep.add_argument(
        "--bucket",
        default=os.environ.get("DEPLOY_BUCKET"),
        help="S3 bucket for the code (default: created per account and region)",
    )
    dep.add_argument("--stack-name")
    dep.add_argument("--no-bootstrap", action="store_true", help="do not create a first account")
    dep.add_argument("--out", default=None, help="package directory (default build/<stage>)")
    args = parser.parse_args(argv)
    if args.command == "resources":
        for path in write_generated():
            print(f"wrote {path}")
    elif args.command == "package":
        print(package(args.stage, args.out))
    else:
        out = args.out or os.path.join(PROJECT_DIR, "build", args.stage)
        deploy(
            args.stage, args.localstack, args.bucket, args.stack_name, not args.no_bootstrap, out
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
