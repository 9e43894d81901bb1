#!/usr/bin/env bash
# Creates the GKE cluster of the thesis's evaluation: Nodes in two zones of
# one region, each with one local NVMe SSD attached as a raw block device.
# Every flag is explained in README.md beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"

[[ -n $PROJECT ]] || { echo "set PROJECT (or gcloud config set project ...)" >&2; exit 2; }

gcloud container clusters create "$CLUSTER" \
  --project "$PROJECT" \
  --region "$REGION" \
  --node-locations "$ZONES" \
  --num-nodes "$NODES_PER_ZONE" \
  --machine-type "$MACHINE_TYPE" \
  --local-nvme-ssd-block count=1 \
  --release-channel regular

gcloud container clusters get-credentials "$CLUSTER" --project "$PROJECT" --region "$REGION"
kubectl get nodes -L topology.kubernetes.io/zone
