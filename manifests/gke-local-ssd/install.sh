#!/usr/bin/env bash
# Installs, on the cluster kubectl points at: the local static provisioner
# with the `local-disks` StorageClass, then the operator (kubectl apply -k
# manifests/), and waits until both run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

kubectl apply -f "$here/local-disks.yaml"
kubectl -n local-disks rollout status daemonset/local-static-provisioner --timeout=5m
# One PersistentVolume per Node's local SSD (they may take a minute).
kubectl get pv -o wide

kubectl apply -k "$repo/manifests/"
kubectl -n cassandra-operator rollout status deployment/cassandra-operator --timeout=5m
