#!/usr/bin/env bash
# What to look at after each step: the Cluster (members, ready members,
# conditions), its Events, the Pods and their Nodes, and the ring as one
# member sees it (nodetool status through the sidecar's binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
cluster=${1:-cassandra}

kubectl -n "$NAMESPACE" get cass "$cluster"
echo
kubectl -n "$NAMESPACE" get cass "$cluster" \
  -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}'
echo
kubectl -n "$NAMESPACE" get events --field-selector "involvedObject.name=$cluster" \
  --sort-by=.lastTimestamp | tail -n 10
echo
kubectl -n "$NAMESPACE" get pods -l "cassandra.rook.io/cluster=$cluster" -o wide
echo
# nodetool status from the first ready member.
member=$(kubectl -n "$NAMESPACE" get pods -l "cassandra.rook.io/cluster=$cluster" \
  -o jsonpath='{range .items[?(@.status.containerStatuses[0].ready==true)]}{.metadata.name}{"\n"}{end}' | head -n 1)
if [[ -n $member ]]; then
  kubectl -n "$NAMESPACE" exec "$member" -c cassandra -- /mnt/shared/cassandra-operator nodetool status
else
  echo "no ready member yet"
fi
