#!/usr/bin/env bash
# A real two-node SLURM cluster on this one machine, next to the single-node one of setup-slurm.sh,
# for tests that run multi-node jobs (torch gloo across nodes). Run as root:
#
#   bash tests/external/slurm/setup-two-node-slurm.sh          # ~3 s the first time, ~1 s once it runs
#   SLURM_CONF=/etc/slurm-two-nodes/slurm.conf sinfo           # partition "two": node1 and node2
#   bash tests/external/slurm/setup-two-node-slurm.sh --stop   # stops and removes all of it
#
# It runs setup-slurm.sh first (packages, munge, mariadb and slurmdbd, which this cluster shares),
# then builds cluster snakeskills2: a bridge ss-br0 (10.77.0.1/24) in this network namespace, and
# per node a network namespace ss-nodeN with eth0 (10.77.0.2 node1, 10.77.0.3 node2) on a veth
# attached to the bridge. Each slurmd runs there in its own UTS and mount namespace: hostname
# node1/node2, /etc/hosts bind-mounted from /etc/slurm-two-nodes/hosts (so a node's hostname
# resolves to its eth0 address, as torch gloo needs) and /etc/slurm from /etc/slurm-two-nodes
# (so on the nodes the default config is this cluster's). slurmctld runs in this network namespace
# (clients here reach it with SLURM_CONF) at head(10.77.0.1):6827, in a UTS namespace whose
# hostname is "head": slurmctld 22.05 only accepts to be SlurmctldHost when its hostname says so.
# Nothing outside 10.77.0.0/24 and the namespaces it makes is touched. Rerunning it is safe: what
# runs with an unchanged config is left alone, what is missing or dead is recreated, a node left
# down or drained is resumed. It ends with a job on both nodes. Logs: /var/log/slurm-two-nodes/.
set -euo pipefail

CLUSTER=snakeskills2
PARTITION=two
ETC=/etc/slurm-two-nodes
CONF=$ETC/slurm.conf
HOSTS=$ETC/hosts
LIB=/var/lib/slurm-two-nodes
RUN=/run/slurm-two-nodes
LOGS=/var/log/slurm-two-nodes
BRIDGE=ss-br0
HEAD="head"
HEAD_IP=10.77.0.1
CTLD_PORT=6827
NODES=(node1 node2) # node i (0-based) has address 10.77.0.(i+2), netns ss-<node>, veth ss-veth<i+1>

log() { echo "setup-two-node-slurm: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}
node_ip() { echo "10.77.0.$(($1 + 2))"; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2
    shift 2
    for _ in $(seq $((seconds * 4))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "$what did not come up in ${seconds} s (see $LOGS/)"
}
# The daemons run from symlinks named slurmctld-two and slurmd-two (with argv[0] still slurmctld and
# slurmd: slurm tells its daemons apart by argv[0], and crashes when it is another name), so that
# setup-slurm.sh's `pgrep -x slurmctld` / `pgrep -x slurmd` only ever see the single-node ones.
alive() { # alive PIDFILE NAME: the process in PIDFILE runs and is called NAME
    local pid
    pid=$(cat "$1" 2>/dev/null) && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}
stop_pids() { # stop_pids PID...: SIGTERM, then SIGKILL what is left after 10 s
    [[ $# -gt 0 ]] || return 0
    kill "$@" 2>/dev/null || true
    for _ in $(seq 40); do
        kill -0 "$@" 2>/dev/null || return 0
        sleep 0.25
    done
    kill -9 "$@" 2>/dev/null || true
}
daemon_pids() { # the slurmctld and slurmds of this cluster that run
    local f
    for f in "$RUN"/slurmctld.pid "$RUN"/slurmd-*.pid; do
        if alive "$f" slurmctld-two || alive "$f" slurmd-two; then cat "$f"; fi
    done
}
remove_node_net() { # remove_node_net I: the namespace of node I, everything running in it, its veth
    local ns=ss-${NODES[$1]}
    # shellcheck disable=SC2046 # one pid a word
    [[ -e /run/netns/$ns ]] && stop_pids $(ip netns pids "$ns" 2>/dev/null)
    ip netns del "$ns" 2>/dev/null || rm -f "/run/netns/$ns"
    ip link del "ss-veth$(($1 + 1))" 2>/dev/null || true
}

[[ $(id -u) -eq 0 ]] || die "must run as root (creates namespaces and starts daemons)"
# one run of this script at a time (setup-slurm.sh, which it runs, takes a lock of its own): it reruns itself under
# flock, which holds the lock without handing it to the daemons started here (-o)
if [[ -z ${SNAKESKILLS_SLURM_TWO_NODES_LOCKED:-} ]]; then
    SNAKESKILLS_SLURM_TWO_NODES_LOCKED=1 exec flock -o /tmp/snakeskills-slurm-two-nodes-setup.lock bash "$0" "$@"
fi

if [[ ${1:-} == --stop ]]; then
    # shellcheck disable=SC2046 # one pid a word
    stop_pids $(daemon_pids)
    for i in "${!NODES[@]}"; do remove_node_net "$i"; done
    ip link del "$BRIDGE" 2>/dev/null || true
    log "stopped: slurmctld, slurmds, jobs, namespaces and bridge of $CLUSTER"
    exit 0
fi

# 1. the single-node cluster: packages, munge, mariadb and slurmdbd, shared with this cluster
env -u SLURM_CONF bash "$(dirname "${BASH_SOURCE[0]}")/setup-slurm.sh"
export SLURM_CONF=$CONF # from here on, slurm commands talk to this cluster
# ip (iproute2) makes the bridge and the namespaces; a minimal image may lack it
if ! command -v ip >/dev/null; then
    log "installing iproute2"
    exec 9>/tmp/snakeskills-apt.lock # one apt-get at a time on this machine (setup-slurm.sh takes the same lock)
    flock 9
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
    exec 9>&-
fi

# 2. config: two nodes with this machine's CPUs and 40 % of its memory each (they share both)
node_line=$(slurmd -C | sed -n 1p)
hardware=$(sed -E 's/^NodeName=[^ ]+ //; s/ RealMemory=[0-9]+//' <<<"$node_line")
cpus=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$node_line")
memory=$(($(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$node_line") * 4 / 10))
new_conf=$(
    cat <<EOF
# written by tests/external/slurm/setup-two-node-slurm.sh: two nodes in network namespaces
ClusterName=$CLUSTER
SlurmctldHost=$HEAD($HEAD_IP)
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$LIB/slurmctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOGS/slurmctld.log
# slurmd replaces %n with its node name (-N): one spool dir, pid file and log per node
SlurmdSpoolDir=$LIB/slurmd-%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOGS/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=300
# the slurmdbd of setup-slurm.sh, reached through the bridge from the nodes too
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HEAD_IP
JobCompType=jobcomp/none
GresTypes=gpu
AccountingStorageTRES=gres/gpu
EOF
    for i in "${!NODES[@]}"; do
        echo "NodeName=${NODES[$i]} NodeAddr=$(node_ip "$i") $hardware RealMemory=$memory Gres=gpu:2 State=UNKNOWN"
    done
    echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$((memory / cpus))"
)
new_gres_conf=$(for n in "${NODES[@]}"; do echo "NodeName=$n Name=gpu File=/dev/null,/dev/zero AutoDetect=off"; done)
new_hosts=$(
    printf '127.0.0.1 localhost\n%s %s\n' "$HEAD_IP" "$HEAD"
    for i in "${!NODES[@]}"; do echo "$(node_ip "$i") ${NODES[$i]}"; done
)
mkdir -p "$ETC" "$LIB/slurmctld" "$LIB/bin" "$RUN" "$LOGS" "${NODES[@]/#/$LIB/slurmd-}"
chown slurm:slurm "$LIB/slurmctld" "$RUN" "$LOGS"
ln -sfn /usr/sbin/slurmctld "$LIB/bin/slurmctld-two"
ln -sfn /usr/sbin/slurmd "$LIB/bin/slurmd-two"
conf_changed=0
update() { # update FILE CONTENT: (re)write FILE when it does not hold CONTENT
    if [[ ! -f $1 ]] || [[ "$(cat "$1")" != "$2" ]]; then
        printf '%s\n' "$2" >"$1"
        conf_changed=1
    fi
}
update "$CONF" "$new_conf"
update "$ETC/gres.conf" "$new_gres_conf"
update "$HOSTS" "$new_hosts"
pids=$(daemon_pids)
if [[ $conf_changed -eq 1 && -n $pids ]]; then
    # node resources are only read at start: restart the daemons (running jobs are left alone)
    log "config changed: restarting slurmctld and slurmds"
    # shellcheck disable=SC2086 # one pid a word
    stop_pids $pids
fi

# 3. network: the bridge, then per node a namespace with lo and eth0 (a veth on the bridge)
# (`grep -q` reads here-strings, never pipes: with pipefail, the writer's SIGPIPE would fail the test)
if ! grep -q " $HEAD_IP/24 " <<<"$(ip -o addr show dev "$BRIDGE" 2>/dev/null)"; then
    ip link del "$BRIDGE" 2>/dev/null || true
    ip link add "$BRIDGE" type bridge
    ip addr add "$HEAD_IP/24" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up
for i in "${!NODES[@]}"; do
    ns=ss-${NODES[$i]} veth=ss-veth$((i + 1))
    if grep -q " $(node_ip "$i")/24 " <<<"$(ip -n "$ns" -o addr show dev eth0 2>/dev/null)" &&
        grep -q "master $BRIDGE " <<<"$(ip -o link show dev "$veth" 2>/dev/null)"; then
        ip link set "$veth" up && ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
        continue
    fi
    log "creating network namespace $ns ($(node_ip "$i") on $BRIDGE)"
    remove_node_net "$i"
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done

# 4. slurmctld, registered with the shared slurmdbd first
if ! grep -qx "$CLUSTER" <<<"$(sacctmgr -n -P list cluster format=cluster)"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
cd /
if ! alive "$RUN/slurmctld.pid" slurmctld-two; then
    log "starting slurmctld ($HEAD, $HEAD_IP:$CTLD_PORT)"
    unshare --uts --mount bash -c "hostname $HEAD && mount --bind $HOSTS /etc/hosts &&
        exec -a slurmctld $LIB/bin/slurmctld-two"
fi
wait_for 30 slurmctld scontrol ping

# 5. one slurmd per node, in the node's network namespace and its own UTS and mount namespaces
for i in "${!NODES[@]}"; do
    node=${NODES[$i]} ns=ss-${NODES[$i]}
    pidfile=$RUN/slurmd-$node.pid
    if alive "$pidfile" slurmd-two &&
        [[ $(stat -L -c %i "/proc/$(cat "$pidfile")/ns/net") == $(stat -L -c %i "/run/netns/$ns") ]]; then
        continue
    fi
    alive "$pidfile" slurmd-two && stop_pids "$(cat "$pidfile")" # in a namespace that was replaced
    log "starting slurmd $node in $ns"
    nsenter --net="/run/netns/$ns" unshare --uts --mount bash -c "hostname $node &&
        mount --bind $HOSTS /etc/hosts && mount --bind $ETC /etc/slurm &&
        exec -a slurmd $LIB/bin/slurmd-two -N $node"
done

# 6. both nodes idle (one left down or drained is resumed), then a job across both
states() { sinfo -h -N -p "$PARTITION" -o '%N %T' | sort -u; }
usable() { [[ $(states | grep -cE ' (idle|mixed|allocated)$') -eq ${#NODES[@]} ]]; }
for _ in $(seq 120); do
    usable && break
    while read -r node state; do
        if [[ $state =~ down|drain ]]; then
            scontrol update nodename="$node" state=resume 2>/dev/null || true
        fi
    done < <(states)
    sleep 0.25
done
usable || die "nodes are not idle: $(states | tr '\n' ' ') $(sinfo -h -R)"
if [[ $(states | grep -c ' idle$') -eq ${#NODES[@]} ]]; then
    hosts=$(timeout 60 srun --chdir=/tmp --nodes=${#NODES[@]} --ntasks=${#NODES[@]} --mem=64M hostname |
        sort | paste -sd ' ') || true
    [[ $hosts == "${NODES[*]}" ]] || die "a job on all nodes printed '$hosts', not '${NODES[*]}'"
else
    log "nodes are busy with jobs: the check job is skipped"
fi
wait_for 30 sacct sacct -n -X
log "ready: $(sinfo -h -o '%P %D nodes %T %c CPUs %m MB %G' | paste -sd ' ')"
log "use it with SLURM_CONF=$CONF, e.g. SLURM_CONF=$CONF sinfo (partition $PARTITION;" \
    "$(for i in "${!NODES[@]}"; do printf '%s %s, ' "${NODES[$i]}" "$(node_ip "$i")"; done)slurmctld $HEAD_IP:$CTLD_PORT)"
