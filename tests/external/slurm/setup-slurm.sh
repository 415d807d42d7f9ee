#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for tests/external/test_slurm.py and for trying
# profiles/slurm by hand. Debian (slurm-wlm 22.05 on bookworm), run as root:
#
#   bash tests/external/slurm/setup-slurm.sh        # ~20 s the first time, ~1 s once it runs
#   sinfo; sbatch --wrap hostname; sacct
#
# It installs munge, slurmctld, slurmd, the client tools, slurmdbd and MariaDB (slurmdbd keeps job
# accounting, so `sacct` works: snakemake-executor-plugin-slurm checks job states with it), writes
# /etc/slurm/slurm.conf for one node called localhost with this machine's CPUs and memory, and
# starts the daemons without systemd. Rerunning it is safe: installed packages, running daemons
# and an unchanged config are left alone; it ends by checking that the node is idle and that
# sacct answers. Logs: /var/log/slurm/*.log. Exit 0 only when the cluster is usable.
set -euo pipefail

CLUSTER=snakeskills
PARTITION=debug
CONF=/etc/slurm/slurm.conf
GRES_CONF=/etc/slurm/gres.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
PACKAGES=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)

log() { echo "setup-slurm: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages and starts daemons)"
# one run of this script at a time (two test workers may bring the cluster up at once): it reruns itself under
# flock, which holds the lock without handing it to the daemons started here (-o)
if [[ -z ${SNAKESKILLS_SLURM_SETUP_LOCKED:-} ]]; then
    SNAKESKILLS_SLURM_SETUP_LOCKED=1 exec flock -o /tmp/snakeskills-slurm-setup.lock bash "$0" "$@"
fi
command -v apt-get >/dev/null || die "needs apt-get (Debian or Ubuntu)"

# 1. packages (skipped when every daemon and tool is already there)
missing=0
for tool in munged slurmctld slurmd sbatch sacct slurmdbd mariadbd; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || missing=1
done
if [[ $missing -eq 1 ]]; then
    log "installing ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # one apt-get at a time on this machine: the suite's other installs (bubblewrap) take the same lock
    exec 9>/tmp/snakeskills-apt.lock
    flock 9
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
    flock -u 9
fi

# 2. config: one node, named localhost, with the CPUs and memory slurmd detects here
node_line=$(slurmd -C | head -n 1 | sed -E 's/^NodeName=[^ ]+/NodeName=localhost/')
cpus=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$node_line")
memory=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$node_line")
memory=$((memory * 9 / 10)) # leave room for the OS and the daemons
node_line=$(sed -E "s/RealMemory=[0-9]+/RealMemory=$memory/" <<<"$node_line")
default_mem_per_cpu=$((memory / cpus))

new_conf=$(
    cat <<EOF
# written by tests/external/slurm/setup-slurm.sh: a single-node cluster on this machine
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroups in containers: plain process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# finished jobs stay visible to squeue/scontrol for 5 minutes (> 3x the plugin's status interval)
MinJobAge=300
# accounting through slurmdbd, so that sacct (the plugin's status command) answers
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
# one pretend GPU (a count, no device file), so that jobs asking for --gpus=1 are scheduled and the
# GPU requests of profiles/slurm are exercised on a machine without one
GresTypes=gpu
AccountingStorageTRES=gres/gpu
$node_line Gres=gpu:2 State=UNKNOWN
# DefMemPerCPU: a job that asks for no memory gets this much a CPU instead of the whole node
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$default_mem_per_cpu
EOF
)
new_gres_conf="NodeName=localhost Name=gpu File=/dev/null,/dev/zero AutoDetect=off"
new_dbd_conf=$(
    cat <<EOF
# written by tests/external/slurm/setup-slurm.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
)
conf_changed=0
if [[ ! -f $CONF ]] || [[ "$(cat "$CONF")" != "$new_conf" ]]; then
    printf '%s\n' "$new_conf" >"$CONF"
    conf_changed=1
fi
if [[ ! -f $GRES_CONF ]] || [[ "$(cat "$GRES_CONF")" != "$new_gres_conf" ]]; then
    printf '%s\n' "$new_gres_conf" >"$GRES_CONF"
    conf_changed=1
fi
if [[ ! -f $DBD_CONF ]] || [[ "$(cat "$DBD_CONF")" != "$new_dbd_conf" ]]; then
    printf '%s\n' "$new_dbd_conf" >"$DBD_CONF"
fi
chown slurm:slurm "$DBD_CONF"
chmod 600 "$DBD_CONF"
mkdir -p /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm /run/munge
chown slurm:slurm /var/lib/slurm/slurmctld /var/log/slurm
chown munge:munge /run/munge

running() { pgrep -x "$1" >/dev/null; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2
    shift 2
    for _ in $(seq $((seconds * 4))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "$what did not come up in ${seconds} s (see /var/log/slurm/)"
}

# 3. daemons, in dependency order: munge -> mariadb -> slurmdbd -> slurmctld -> slurmd
if ! running munged; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
fi
wait_for 10 munge bash -c 'munge -n | unmunge'

if ! running mariadbd; then
    log "starting mariadb"
    mkdir -p /run/mysqld
    chown mysql:mysql /run/mysqld
    (setsid /usr/bin/mysqld_safe --user=mysql >/dev/null 2>&1 &)
fi
wait_for 60 mariadb mysqladmin ping
mysql -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
          GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

if ! running slurmdbd; then
    log "starting slurmdbd"
    /usr/sbin/slurmdbd
fi
wait_for 30 slurmdbd sacctmgr -n list cluster
if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

if [[ $conf_changed -eq 1 ]] && { running slurmctld || running slurmd; }; then
    # node resources (CPUs, memory, GRES) are only read at start: restart both daemons
    log "slurm.conf changed: restarting slurmctld and slurmd"
    scontrol shutdown >/dev/null 2>&1 || true
    for _ in $(seq 120); do
        running slurmctld || running slurmd || break
        sleep 0.25
    done
    ! running slurmctld && ! running slurmd || die "slurmctld/slurmd did not stop for the restart"
fi
if ! running slurmctld; then
    log "starting slurmctld"
    /usr/sbin/slurmctld
fi
wait_for 30 slurmctld scontrol ping

if ! running slurmd; then
    log "starting slurmd"
    /usr/sbin/slurmd -N localhost
fi

# 4. the node must be idle (a node left down or drained by an earlier run is resumed)
node_idle() { [[ $(sinfo -h -n localhost -o %T) =~ ^(idle|mixed|allocated)$ ]]; }
for _ in $(seq 120); do
    node_idle && break
    state=$(sinfo -h -n localhost -o %T || true)
    if [[ $state =~ down|drain ]]; then
        scontrol update nodename=localhost state=resume 2>/dev/null || true
    fi
    sleep 0.25
done
node_idle || die "node localhost is '$(sinfo -h -n localhost -o %T)', not idle: $(sinfo -h -R)"
wait_for 30 sacct sacct -n -X
log "ready: $(sinfo -h -o '%P %D %T %c CPUs %m MB')"
