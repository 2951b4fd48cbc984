#!/bin/bash
# A one-node SLURM cluster on this machine, for trying cluster/slurm.sbatch and for the tests
# (tests/cluster/): the controller and the only compute node are this host.
#   sudo bash cluster/slurm-local.sh          set it up and start it (or check that it runs)
#   sudo bash cluster/slurm-local.sh stop     stop the daemons this script started, nothing else
#   bash cluster/slurm-local.sh status        what runs, and the node's state
# Start: installs slurm-wlm and munge with apt-get when missing, creates a munge key when there is
# none, writes /etc/slurm/slurm.conf for this host (its `hostname -s`, `nproc` CPUs and memory;
# no cgroups, so it also works in containers), starts munged, slurmctld and slurmd when they are
# not running, and waits until the node is idle. Running it again changes nothing that works.
# It refuses to overwrite a slurm.conf it did not write. Exit 0 when the cluster is up; 1 with the
# reason on stderr when it cannot be (not root, no apt-get, the install failed, a daemon did not
# start, the node did not come up).
# Settings (environment, optional):
#   MEMATTN_SLURM_CONF_DIR   where slurm.conf goes (default /etc/slurm, what the Debian packages read)
#   MEMATTN_SLURM_STATE      this script's own files: which daemons it started (default /run/memattn-slurm)
#   MEMATTN_SLURM_TIMEOUT    seconds to wait for the node to be idle (default 60)
set -euo pipefail

conf_dir=${MEMATTN_SLURM_CONF_DIR:-/etc/slurm}
conf=$conf_dir/slurm.conf
state=${MEMATTN_SLURM_STATE:-/run/memattn-slurm}
timeout=${MEMATTN_SLURM_TIMEOUT:-60}
mark="# written by cluster/slurm-local.sh (memattn): a one-node cluster on this host"
spool=/var/spool/memattn-slurm
logs=/var/log/memattn-slurm

say() { echo "slurm-local: $*"; }
die() { echo "slurm-local: error: $*" >&2; exit 1; }

# the pid a daemon's pid file names, when that process runs
running_pid() {
    local pid
    [ -r "$1" ] || return 1
    pid=$(tr -dc 0-9 < "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

munge_works() { munge -n < /dev/null 2>/dev/null | unmunge > /dev/null 2>&1; }
ctld_works() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_state() { sinfo --noheader --nodes="$1" --format=%T 2>/dev/null | head -n 1; }

stop() {
    local name pid any=""
    [ -d "$state" ] || { say "nothing to stop (this script started no daemon)"; return 0; }
    for name in slurmd slurmctld munged; do  # the reverse of the start order
        [ -e "$state/$name.pid" ] || continue
        any=1
        if pid=$(running_pid "$state/$name.pid") && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
            kill -TERM "$pid"
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL "$pid" 2>/dev/null || true
                say "stopped $name (pid $pid, killed: it did not stop within 10 s of SIGTERM)"
            else
                say "stopped $name (pid $pid)"
            fi
        else
            say "$name (started by this script) no longer runs"
        fi
        rm -f "$state/$name.pid"
    done
    [ -n "$any" ] || say "nothing to stop (this script started no daemon)"
}

status() {
    local host name pid
    host=$(hostname -s)
    for name in munged slurmctld slurmd; do
        if pid=$(pgrep -x "$name" | head -n 1); then
            if [ "$(cat "$state/$name.pid" 2>/dev/null)" = "$pid" ]; then
                say "$name runs (pid $pid, started by this script)"
            else
                say "$name runs (pid $pid, not started by this script)"
            fi
        else
            say "$name does not run"
        fi
    done
    say "node $host: $(node_state "$host" || true)"
}

install_packages() {
    local missing=() cmd
    for cmd in munged munge slurmctld slurmd sbatch; do
        command -v "$cmd" > /dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" > /dev/null || missing+=("$cmd")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get > /dev/null || die "${missing[*]} not installed and no apt-get here: install SLURM (slurmctld, slurmd, the client commands) and munge yourself"
    say "installing slurm-wlm and munge (missing: ${missing[*]}) with apt-get ..."
    local log
    log=$(mktemp)
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge; } > "$log" 2>&1; then
        tail -n 5 "$log" >&2
        rm -f "$log"
        die "apt-get could not install slurm-wlm and munge (its last lines are above)"
    fi
    rm -f "$log"
}

munge_key() {
    local key=/etc/munge/munge.key
    [ -s "$key" ] && return 0
    say "creating a munge key ($key)"
    mkdir -p /etc/munge
    if command -v mungekey > /dev/null; then
        mungekey --create --keyfile="$key" --force
    else
        dd if=/dev/urandom bs=1 count=1024 of="$key" status=none
    fi
    chown munge:munge /etc/munge "$key"
    chmod 700 /etc/munge
    chmod 400 "$key"
}

start_munged() {
    if munge_works; then say "munged runs"; return 0; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 755 /run/munge
    # as the munge user, as its service does; --force: past a socket left by a munged that died
    runuser -u munge -- munged --force || die "munged did not start (see /var/log/munge/munged.log)"
    for _ in $(seq 50); do munge_works && break; sleep 0.1; done
    munge_works || die "munged started but munge -n | unmunge fails (see /var/log/munge/munged.log)"
    cp /run/munge/munged.pid "$state/munged.pid"
    say "started munged (pid $(cat "$state/munged.pid"))"
}

write_conf() {
    local host=$1 cpus mem new
    cpus=$(nproc)
    mem=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)  # MB, as slurmd counts it
    new=$(cat <<EOF
$mark
# (re)written on each run of the script; a change of CPUs or memory restarts the daemons it started
ClusterName=memattn-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
# no cgroups: works where they cannot be used (containers, gVisor)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
# a job that becomes eligible (e.g. 2 minutes after a requeue) starts within seconds
SchedulerParameters=sched_interval=10,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
JobRequeue=1
# finished jobs stay visible to \`scontrol show job\` (their exit code) for 10 minutes
MinJobAge=600
KillWait=30
SlurmctldPidFile=/run/memattn-slurm-ctld.pid
SlurmdPidFile=/run/memattn-slurm-d.pid
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$spool/d
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)
    if [ -e "$conf" ] && ! head -n 1 "$conf" | grep -qxF "$mark"; then
        die "$conf exists and was not written by this script: it is left alone. Move it away to let the script write its own, or start that cluster yourself"
    fi
    mkdir -p "$conf_dir" "$spool/ctld" "$spool/d" "$logs"
    if [ -e "$conf" ] && [ "$(cat "$conf")" = "$new" ]; then
        return 1  # unchanged
    fi
    printf '%s\n' "$new" > "$conf"
    say "wrote $conf: node $host, $cpus CPU(s), $mem MB"
    return 0
}

# start daemon NAME (slurmctld or slurmd) unless it runs; restart it when the conf changed and
# this script started it
start_daemon() {
    local name=$1 pidfile=$2 changed=$3 pid
    if pid=$(running_pid "$pidfile"); then
        if [ "$changed" = 1 ]; then
            if [ "$(cat "$state/$name.pid" 2>/dev/null)" = "$pid" ]; then
                say "restarting $name for the new slurm.conf"
                kill -TERM "$pid"
                for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            else
                die "slurm.conf changed but $name (pid $pid) was not started by this script: restart it yourself"
            fi
        else
            say "$name runs (pid $pid)"
            return 0
        fi
    fi
    "$name" || die "$name did not start (see $logs/$name.log)"
    for _ in $(seq 100); do pid=$(running_pid "$pidfile") && break; sleep 0.1; done
    [ -n "${pid:-}" ] || die "$name exited at once (the end of $logs/$name.log: $(tail -n 3 "$logs/$name.log" 2>/dev/null | tr '\n' ' '))"
    echo "$pid" > "$state/$name.pid"
    say "started $name (pid $pid)"
}

start() {
    local host changed=0 node
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages, writes $conf and starts the daemons as root); run it with sudo"
    export PATH=$PATH:/usr/sbin:/sbin
    install_packages
    mkdir -p "$state"
    host=$(hostname -s)
    [ -n "$host" ] || die "\`hostname -s\` gives no name"
    munge_key
    start_munged
    write_conf "$host" && changed=1
    start_daemon slurmctld /run/memattn-slurm-ctld.pid "$changed"
    for _ in $(seq 100); do ctld_works && break; sleep 0.2; done
    ctld_works || die "slurmctld does not answer \`scontrol ping\` (see $logs/slurmctld.log)"
    start_daemon slurmd /run/memattn-slurm-d.pid "$changed"
    local deadline=$((SECONDS + timeout)) resumed=""
    while :; do
        node=$(node_state "$host" || true)
        case $node in
            idle|mixed|allocated|completing) break ;;
            down*|drain*|drained*|fail*)
                if [ -z "$resumed" ]; then  # e.g. down after the machine restarted: it is ours, back to service
                    scontrol update NodeName="$host" State=RESUME 2>/dev/null || true
                    resumed=1
                fi ;;
        esac
        if [ "$SECONDS" -ge "$deadline" ]; then
            die "node $host is '${node:-unknown}', not idle, ${timeout}s after slurmd started ($(scontrol show node "$host" 2>/dev/null | grep -o 'Reason=.*' || true); see $logs/slurmd.log)"
        fi
        sleep 0.5
    done
    say "node $host is $node: submit with sbatch (partition local)"
}

case ${1:-start} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac
