#!/usr/bin/env bash
# Simulates the loss of a Node and its local SSD, as the thesis does: the VM
# of the Node that runs the given member is removed from its managed
# instance group (deleted, and not recreated: a recreated VM would come back
# under the same name with an empty disk), then its Node object is deleted.
#
#   ./lose-node.sh cassandra-europe-west1-europe-west1-b-2
#
# The operator then replaces the lost member (DESIGN.md section 5, "Local
# disk loss") on another Node of the zone, which needs a spare one (the
# guide's step 6 leaves one per zone).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"
member=${1:?usage: lose-node.sh <member pod>}

node=$(kubectl -n "$NAMESPACE" get pod "$member" -o jsonpath='{.spec.nodeName}')
zone=$(kubectl get node "$node" -o jsonpath='{.metadata.labels.topology\.kubernetes\.io/zone}')
echo "deleting Node $node (zone $zone), which runs $member"
# The node pool's instance group in that zone.
mig=$(gcloud container node-pools describe default-pool --cluster "$CLUSTER" \
  --project "$PROJECT" --region "$REGION" --format='value(instanceGroupUrls)' |
  tr ';' '\n' | grep "/zones/$zone/" | sed 's|.*/||')
gcloud compute instance-groups managed delete-instances "$mig" --instances "$node" \
  --project "$PROJECT" --zone "$zone"
kubectl delete node "$node" --ignore-not-found
