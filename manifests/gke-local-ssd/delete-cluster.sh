#!/usr/bin/env bash
# Deletes the GKE cluster and with it every local SSD and its data.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
gcloud container clusters delete "$CLUSTER" --project "$PROJECT" --region "$REGION" --quiet
