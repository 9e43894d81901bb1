# shellcheck shell=bash
# The guide's settings, sourced by its scripts; override any of them in the
# environment (e.g. PROJECT=my-project ./create-cluster.sh).
: "${PROJECT:=$(gcloud config get-value project 2>/dev/null)}"
# The thesis's region and its two zones, one rack each.
: "${REGION:=europe-west1}"
: "${ZONES:=europe-west1-b,europe-west1-c}"
: "${CLUSTER:=cassandra-local-ssd}"
# 4 vCPUs and 16 GB: room for one member (2 CPU / 8Gi) and the Node's own
# daemons; N2 is a second-generation series, which takes a chosen number
# of local SSDs.
: "${MACHINE_TYPE:=n2-standard-4}"
# Nodes per zone: three for the first rack's three members, one member per
# Node (the example's anti-affinity).
: "${NODES_PER_ZONE:=3}"
: "${NAMESPACE:=cassandra}"
export PROJECT REGION ZONES CLUSTER MACHINE_TYPE NODES_PER_ZONE NAMESPACE
