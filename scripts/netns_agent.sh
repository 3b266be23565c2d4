#!/usr/bin/env bash
# Open MPI's rsh agent for scripts/netns.sh (in place of ssh): called as
# "netns_agent.sh [ssh options] HOST COMMAND...", runs COMMAND in HOST's
# network namespace under its own host name.
set -euo pipefail
while [[ "${1:-}" == -* ]]; do shift; done
host="${1:?netns_agent: no host}"
shift
case "$host" in
  10.77.0.1) ns=pb-nodeA ;;
  10.77.0.2) ns=pb-nodeB ;;
  *) echo "netns_agent: unknown host $host (10.77.0.1 or 10.77.0.2)" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns; $*"
