#!/usr/bin/env bash
# Every step of a LocalStack deployment, for a machine with Docker (docs/DEPLOY.md):
#   1. start LocalStack from docker-compose.yml (127.0.0.1:4566) and wait until it is healthy;
#   2. package the `localstack` stage and deploy it as a CloudFormation stack into LocalStack
#      (scripts/deploy_stack.py: S3 upload, change set, wait);
#   3. bootstrap a first account and print the API's URL and its admin API key.
# Environment: PYTHON (default .venv/bin/python), LOCALSTACK_ENDPOINT (http://localhost:4566),
# LOCALSTACK_AUTH_TOKEN (passed to LocalStack when your image needs one).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
ENDPOINT=${LOCALSTACK_ENDPOINT:-http://localhost:4566}

if ! command -v docker >/dev/null 2>&1; then
  echo "docker is not installed: LocalStack runs in Docker (see docs/DEPLOY.md)" >&2
  exit 2
fi
echo "starting LocalStack (docker compose up -d localstack)"
docker compose up -d localstack
for _ in $(seq 1 90); do
  if curl -fsS "$ENDPOINT/_localstack/health" 2>/dev/null | grep -q '"dynamodb"'; then
    break
  fi
  sleep 2
done
curl -fsS "$ENDPOINT/_localstack/health" >/dev/null || {
  echo "LocalStack did not become healthy at $ENDPOINT" >&2; exit 1; }

export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1} LOCALSTACK_ENDPOINT="$ENDPOINT"
exec "$PYTHON" scripts/deploy_stack.py deploy --stage localstack --localstack \
  --bucket "${DEPLOY_BUCKET:-tunnel-service-artifacts}" "$@"
