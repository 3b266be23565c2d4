#!/usr/bin/env bash
# Two "nodes" on one machine for real inter-node traffic (#16): two Linux
# network namespaces (pb-nodeA 10.77.0.1, pb-nodeB 10.77.0.2) joined by a veth
# pair whose rate is set with tc (tbf); mpirun runs in nodeA and starts
# nodeB's ranks through scripts/netns_agent.sh (in place of ssh); each node
# has its own host name (UTS namespace), so Open MPI and parabench see two
# nodes: shared memory within a node, TCP over the veth across.
#
#   scripts/netns.sh up [--rate 1gbit]   create both namespaces and the link
#   scripts/netns.sh run NP CMD...       mpirun -np NP across them (NP/2 per node)
#   scripts/netns.sh down                remove them
#   scripts/netns.sh check               exit 0 if namespaces can be made here, 77 (and why) if not
#
# Needs root (or CAP_NET_ADMIN) and iproute2; loopback and namespace
# addresses only. The kernel here has no netem, so latency is not shaped
# (only the rate); `up --delay` is refused rather than ignored.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
A=pb-nodeA B=pb-nodeB

check() {
  if ! command -v ip >/dev/null; then echo "netns: skipped: no ip (iproute2)"; return 77; fi
  if ! command -v mpirun >/dev/null; then echo "netns: skipped: no mpirun"; return 77; fi
  local probe="pb-probe-$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns: skipped: this machine forbids network namespaces (ip netns add failed: needs root or CAP_NET_ADMIN)"
    return 77
  fi
  ip netns del "$probe"
  if ! unshare --uts true 2>/dev/null; then echo "netns: skipped: no UTS namespaces (unshare --uts failed)"; return 77; fi
}

down() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}

up() {
  local rate=1gbit
  while (($#)); do
    case "$1" in
      --rate) rate="$2"; shift 2 ;;
      --delay) echo "netns: --delay needs the kernel's netem qdisc, which this kernel lacks" >&2; return 2 ;;
      *) echo "netns: unknown option $1 (--rate R)" >&2; return 2 ;;
    esac
  done
  down
  ip netns add "$A"
  ip netns add "$B"
  ip link add pb-vA type veth peer name pb-vB
  ip link set pb-vA netns "$A"
  ip link set pb-vB netns "$B"
  ip -n "$A" addr add 10.77.0.1/24 dev pb-vA
  ip -n "$B" addr add 10.77.0.2/24 dev pb-vB
  for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
  ip -n "$A" link set pb-vA up
  ip -n "$B" link set pb-vB up
  # The link's rate, both directions (tbf: a token bucket of 64 KiB).
  ip netns exec "$A" tc qdisc add dev pb-vA root tbf rate "$rate" burst 64kb latency 100ms
  ip netns exec "$B" tc qdisc add dev pb-vB root tbf rate "$rate" burst 64kb latency 100ms
  echo "netns: $A (10.77.0.1) <-> $B (10.77.0.2), $rate each way"
}

run() {
  local np="$1"
  shift
  [[ "$np" =~ ^[0-9]+$ ]] && ((np >= 2 && np % 2 == 0)) || { echo "netns: run needs an even NP >= 2, got '$np'" >&2; return 2; }
  ip netns list | grep -q "^$A" || { echo "netns: not up (scripts/netns.sh up)" >&2; return 2; }
  local per=$((np / 2))
  # shellcheck disable=SC2016
  ip netns exec "$A" unshare --uts /bin/sh -c 'hostname pb-nodeA; exec "$@"' sh \
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np "$np" -H "10.77.0.1:$per,10.77.0.2:$per" \
    --mca plm_rsh_agent "$here/netns_agent.sh" \
    --mca oob_tcp_if_include 10.77.0.0/24 --mca btl tcp,self,vader --mca btl_tcp_if_include 10.77.0.0/24 \
    "$@"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  up) check && up "$@" ;;
  down) down ;;
  run) run "$@" ;;
  check) check ;;
  *) echo "usage: scripts/netns.sh up [--rate R] | run NP CMD... | down | check" >&2; exit 2 ;;
esac
