#!/bin/bash
# A SLURM cluster on this machine, for trying cluster/slurm.sbatch and for the tests (tests/cluster/).
#   sudo bash cluster/slurm-local.sh [--nodes 2]         set it up and start it (or check that it runs)
#   sudo bash cluster/slurm-local.sh stop [--nodes 2]    stop what this script started, nothing else
#   bash cluster/slurm-local.sh status [--nodes 2]       what runs, and the nodes' state
# One node (the default): the controller and the only compute node are this host.
# Two nodes (--nodes 2): a cluster of its own beside the one-node one (its own slurm.conf, ports and
# job ids, so both can run at once). Node 1 is this host at 10.213.7.1; node 2 is a second slurmd
# in a network namespace of its own (memattn-node2), joined to this host by a veth pair at
# 10.213.7.2 (real addresses; nothing is routed beyond this host), with its own host name, /tmp and
# /dev/shm. A bindfs (FUSE) mount at /mnt/memattn-shared, seen by both nodes, stands in for the
# shared filesystem: put the sweep's --output there. Its commands need
# SLURM_CONF=/etc/slurm/memattn-2nodes/slurm.conf, and the job MEMATTN_HEAD_INTERFACE=memattn-n1
# (this host's name resolves to loopback); the script prints both.
# Start: installs slurm-wlm and munge (two nodes: bindfs, iproute2) with apt-get when missing, creates
# a munge key when there is none, writes slurm.conf for this host (its `hostname -s`, `nproc` CPUs
# and memory; no cgroups, so it also works in containers), starts munged, slurmctld and slurmd when
# they are not running, and waits until the nodes are idle. Running it again changes nothing that
# works. It refuses to overwrite a slurm.conf it did not write. Exit 0 when the cluster is up; 1 with
# the reason on stderr when it cannot be (not root, no apt-get, the install failed, a daemon did not
# start, a node did not come up).
# Settings (environment, optional):
#   MEMATTN_SLURM_CONF_DIR   where slurm.conf goes (default /etc/slurm, what the Debian packages
#                            read; two nodes: /etc/slurm/memattn-2nodes)
#   MEMATTN_SLURM_STATE      this script's own files: what it started (default /run/memattn-slurm;
#                            two nodes: /run/memattn-slurm-2nodes)
#   MEMATTN_SLURM_TIMEOUT    seconds to wait for the nodes to be idle (default 60)
#   MEMATTN_SLURM_NET        two nodes: the first three parts of their /24 network (default 10.213.7)
#   MEMATTN_SLURM_SHARED     two nodes: where the shared filesystem is mounted (default /mnt/memattn-shared)
set -euo pipefail

nodes=1 action=start
while [ $# -gt 0 ]; do
    case $1 in
        start|stop|status) action=$1 ;;
        --nodes) nodes=${2:-}; shift ;;
        --nodes=*) nodes=${1#*=} ;;
        *) echo "usage: $0 [start|stop|status] [--nodes 1|2]" >&2; exit 2 ;;
    esac
    shift
done
case $nodes in
    1) name=memattn-slurm cluster=memattn-local default_conf_dir=/etc/slurm
       mark="# written by cluster/slurm-local.sh (memattn): a one-node cluster on this host" ;;
    2) name=memattn-slurm-2nodes cluster=memattn-2nodes default_conf_dir=/etc/slurm/memattn-2nodes
       mark="# written by cluster/slurm-local.sh (memattn): a two-node cluster on this host" ;;
    *) echo "usage: $0 [start|stop|status] [--nodes 1|2] (--nodes takes 1 or 2, not '$nodes')" >&2; exit 2 ;;
esac
export PATH=$PATH:/usr/sbin:/sbin
conf_dir=${MEMATTN_SLURM_CONF_DIR:-$default_conf_dir}
conf=$conf_dir/slurm.conf
export SLURM_CONF=$conf  # the daemons and the commands below read this cluster's slurm.conf
state=${MEMATTN_SLURM_STATE:-/run/$name}
timeout=${MEMATTN_SLURM_TIMEOUT:-60}
spool=/var/spool/$name
logs=/var/log/$name
# two nodes: node 2's network namespace, the veth pair's ends, their network, the shared mount
ns=memattn-node2 veth_host=memattn-n1 veth_node=memattn-n2
net=${MEMATTN_SLURM_NET:-10.213.7}
shared=${MEMATTN_SLURM_SHARED:-/mnt/memattn-shared}

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
node_names() {  # this cluster's nodes: this host first
    local host
    host=$(hostname -s)
    [ -n "$host" ] || die "\`hostname -s\` gives no name"
    if [ "$nodes" = 2 ]; then echo "$host $host-2"; else echo "$host"; fi
}
has_netns() { ip netns list 2>/dev/null | grep -q "^$ns\( \|$\)"; }

# SIGTERM to pid $2 (daemon $1), SIGKILL after 10 s
end_process() {
    local name=$1 pid=$2
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        say "stopped $name (pid $pid, killed: it did not stop within 10 s of SIGTERM)"
    else
        say "stopped $name (pid $pid)"
    fi
}

stop() {
    local name pid any="" other
    [ -d "$state" ] || { say "nothing to stop (this script started nothing)"; return 0; }
    for name in slurmd-2 slurmd slurmctld munged; do  # the reverse of the start order
        [ -e "$state/$name.pid" ] || continue
        any=1
        if pid=$(running_pid "$state/$name.pid") && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${name%-2}" ]; then
            if [ "$name" = munged ] && { pgrep -x slurmctld || pgrep -x slurmd; } > /dev/null; then
                # the other cluster of this script (or another SLURM) still runs on it: theirs to stop
                for other in /run/memattn-slurm /run/memattn-slurm-2nodes; do
                    if [ "$other" != "$state" ] && [ -d "$other" ] && [ ! -e "$other/munged.pid" ]; then
                        mv "$state/munged.pid" "$other/munged.pid"
                        break
                    fi
                done
                say "munged (pid $pid) left running: another SLURM daemon on this machine uses it"
                rm -f "$state/munged.pid"
                continue
            fi
            end_process "$name" "$pid"
        else
            say "$name (started by this script) no longer runs"
        fi
        rm -f "$state/$name.pid"
    done
    if [ -e "$state/netns" ]; then
        any=1
        if has_netns; then
            for pid in $(ip netns pids "$ns" 2>/dev/null); do  # what the jobs left behind there
                end_process "$(cat "/proc/$pid/comm" 2>/dev/null || echo process) in $ns" "$pid"
            done
            ip netns delete "$ns"  # and with it the veth pair
            say "deleted network namespace $ns and the veth pair $veth_host-$veth_node"
        fi
        # `ip netns` made /run/netns a mount point of its own; leave none behind when it is empty
        if mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then umount /run/netns || true; fi
        rm -rf "$spool/$(hostname -s)-2-tmp" "$state/netns"
    fi
    if [ -e "$state/shared.mount" ]; then
        any=1
        other=$(cat "$state/shared.mount")
        if mountpoint -q "$other"; then
            fusermount -u "$other" 2>/dev/null || fusermount -u -z "$other"
            say "unmounted the shared filesystem at $other (its files stay in $spool/shared)"
        fi
        rmdir "$other" 2>/dev/null || true
        rm -f "$state/shared.mount"
    fi
    [ -n "$any" ] || say "nothing to stop (this script started nothing)"
}

status() {
    local daemon pid node pidfile host
    host=$(hostname -s)
    for daemon in munged slurmctld slurmd slurmd-2; do
        case $daemon in
            munged) pidfile=/run/munge/munged.pid ;;
            slurmctld) pidfile=/run/$name-ctld.pid ;;
            slurmd) pidfile=/run/$name-d.pid; [ "$nodes" = 1 ] || pidfile=/run/$name-d-$host.pid ;;
            slurmd-2) [ "$nodes" = 2 ] || continue; pidfile=/run/$name-d-$host-2.pid ;;
        esac
        if pid=$(running_pid "$pidfile"); then
            if [ "$(cat "$state/$daemon.pid" 2>/dev/null)" = "$pid" ]; then
                say "$daemon runs (pid $pid, started by this script)"
            else
                say "$daemon runs (pid $pid, not started by this script)"
            fi
        else
            say "$daemon does not run"
        fi
    done
    if [ "$nodes" = 2 ]; then
        if has_netns; then say "network namespace $ns: node 2 at $net.2"; else say "no network namespace $ns"; fi
        if mountpoint -q "$shared"; then say "shared filesystem mounted at $shared"; else say "nothing mounted at $shared"; fi
    fi
    for node in $(node_names); do
        say "node $node: $(node_state "$node" || true)"
    done
}

install_packages() {
    local missing=() cmd packages=(slurm-wlm munge) commands=(munged munge slurmctld slurmd sbatch)
    [ "$nodes" = 1 ] || { packages+=(bindfs iproute2); commands+=(bindfs ip); }
    for cmd in "${commands[@]}"; do
        command -v "$cmd" > /dev/null || missing+=("$cmd")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get > /dev/null || die "${missing[*]} not installed and no apt-get here: install SLURM (slurmctld, slurmd, the client commands) and munge${packages[2]:+, bindfs and iproute2} yourself"
    say "installing ${packages[*]} (missing: ${missing[*]}) with apt-get ..."
    local log
    log=$(mktemp)
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"; } > "$log" 2>&1; then
        tail -n 5 "$log" >&2
        rm -f "$log"
        die "apt-get could not install ${packages[*]} (its last lines are above)"
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

# node 2's network: a namespace joined to this host by a veth pair, no route beyond this host
start_network() {
    has_netns && return 1
    ! ip -o addr | grep -q " $net\." || die "the network $net.0/24 is in use on this host (ip -o addr); set MEMATTN_SLURM_NET to a free one, e.g. 10.213.8"
    ip netns add "$ns"
    touch "$state/netns"
    ip link add "$veth_host" type veth peer name "$veth_node" netns "$ns"
    ip addr add "$net.1/24" dev "$veth_host"
    ip link set "$veth_host" up
    ip -n "$ns" addr add "$net.2/24" dev "$veth_node"
    ip -n "$ns" link set "$veth_node" up
    ip -n "$ns" link set lo up
    say "network namespace $ns: node 2 at $net.2, this host at $net.1 (veth $veth_host; nothing is routed beyond this host)"
}

# the shared filesystem: a folder of this host, mounted with bindfs (FUSE) where both nodes see it
mount_shared() {
    mountpoint -q "$shared" && { say "the shared filesystem is mounted at $shared"; return 1; }
    mkdir -p "$shared" "$spool/shared"
    chmod 1777 "$spool/shared"
    bindfs -o allow_other "$spool/shared" "$shared" || die "bindfs could not mount $spool/shared at $shared"
    echo "$shared" > "$state/shared.mount"
    say "mounted $spool/shared at $shared (bindfs, FUSE): the shared filesystem of both nodes"
}

write_conf() {
    local host=$1 cpus mem new ctld_addr=127.0.0.1 node_lines node
    cpus=$(nproc)
    mem=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)  # MB, as slurmd counts it
    local ports="" d_pid=/run/$name-d.pid d_spool=$spool/d d_log=$logs/slurmd.log
    node_lines="NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP"
    if [ "$nodes" = 2 ]; then
        ctld_addr=$net.1 mem=$((mem / 2))
        # (job ids apart too: node 1's Ray files are in /tmp/ray-slurm-JOB_ID, beside the other's)
        ports="# ports and job ids apart from the one-node cluster's; both nodes count this machine's CPUs
SlurmctldPort=6827
SlurmdPort=6828
FirstJobId=100001
"
        d_pid=/run/$name-d-%n.pid d_spool=$spool/d-%n d_log=$logs/slurmd-%n.log
        node_lines="NodeName=$host NodeAddr=$net.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=$host-2 NodeAddr=$net.2 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host,$host-2 Default=YES MaxTime=INFINITE State=UP"
    fi
    new=$(cat <<EOF
$mark
# (re)written on each run of the script; a change of CPUs or memory restarts the daemons it started
ClusterName=$cluster
SlurmctldHost=$host($ctld_addr)
${ports}SlurmUser=root
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
SlurmctldPidFile=/run/$name-ctld.pid
SlurmdPidFile=$d_pid
StateSaveLocation=$spool/ctld
SlurmdSpoolDir=$d_spool
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$d_log
$node_lines
EOF
)
    if [ -e "$conf" ] && ! head -n 1 "$conf" | grep -qxF "$mark"; then
        die "$conf exists and was not written by this script: it is left alone. Move it away to let the script write its own, or start that cluster yourself"
    fi
    mkdir -p "$conf_dir" "$spool/ctld" "$logs"
    for node in $(node_names); do mkdir -p "${d_spool/\%n/$node}"; done
    if [ -e "$conf" ] && [ "$(cat "$conf")" = "$new" ]; then
        return 1  # unchanged
    fi
    printf '%s\n' "$new" > "$conf"
    say "wrote $conf: $(node_names | wc -w) node(s) ($(node_names)), $cpus CPU(s) and $mem MB each"
    return 0
}

# start_daemon NAME PIDFILE CHANGED COMMAND...: COMMAND unless the daemon runs; restart it when
# slurm.conf changed and this script started it. NAME is its note in the state folder.
start_daemon() {
    local name=$1 pidfile=$2 changed=$3 pid
    shift 3
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
    "$@" || die "$name did not start (see $logs)"
    for _ in $(seq 100); do pid=$(running_pid "$pidfile") && break; sleep 0.1; done
    [ -n "${pid:-}" ] || die "$name exited at once (see the end of its log in $logs)"
    echo "$pid" > "$state/$name.pid"
    say "started $name (pid $pid)"
}

start() {
    local host changed=0 node node_changed=0 state_now
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages, writes $conf and starts the daemons as root); run it with sudo"
    install_packages
    mkdir -p "$state"
    host=$(hostname -s)
    [ -n "$host" ] || die "\`hostname -s\` gives no name"
    munge_key
    start_munged
    if [ "$nodes" = 2 ]; then  # the controller's address is on the veth pair
        # node 2 sees what its namespace had when it started: a new network or mount restarts it
        start_network && node_changed=1
        mount_shared && node_changed=1
    fi
    write_conf "$host" && changed=1 node_changed=1
    start_daemon slurmctld "/run/$name-ctld.pid" "$changed" slurmctld
    for _ in $(seq 100); do ctld_works && break; sleep 0.2; done
    ctld_works || die "slurmctld does not answer \`scontrol ping\` (see $logs/slurmctld.log)"
    if [ "$nodes" = 1 ]; then
        start_daemon slurmd "/run/$name-d.pid" "$changed" slurmd
    else
        start_daemon slurmd "/run/$name-d-$host.pid" "$changed" slurmd -N "$host"
        mkdir -p "$spool/$host-2-tmp"
        chmod 1777 "$spool/$host-2-tmp"
        # its own host name, /tmp and /dev/shm, as another machine has (nsenter, not `ip netns
        # exec`, which mounts a /sys without the cgroup folder slurmd reads)
        start_daemon slurmd-2 "/run/$name-d-$host-2.pid" "$node_changed" \
            nsenter --net="/run/netns/$ns" unshare --mount --uts -- bash -c \
            'hostname "$1" && mount --bind "$2" /tmp && mount -t tmpfs -o mode=1777 shm /dev/shm && exec slurmd -N "$1"' \
            node2 "$host-2" "$spool/$host-2-tmp"
    fi
    local deadline=$((SECONDS + timeout)) resumed=""
    for node in $(node_names); do
        while :; do
            state_now=$(node_state "$node" || true)
            case $state_now in
                idle|mixed|allocated|completing) break ;;
                down*|drain*|drained*|fail*)
                    if [[ " $resumed " != *" $node "* ]]; then  # e.g. down after the machine restarted: it is ours, back to service
                        scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
                        resumed+=" $node"
                    fi ;;
            esac
            if [ "$SECONDS" -ge "$deadline" ]; then
                die "node $node is '${state_now:-unknown}', not idle, ${timeout}s after slurmd started ($(scontrol show node "$node" 2>/dev/null | grep -o 'Reason=.*' || true); see $logs)"
            fi
            sleep 0.5
        done
        say "node $node is $state_now"
    done
    if [ "$nodes" = 1 ]; then
        say "submit with sbatch (partition local)"
    else
        say "two nodes: $host at $net.1 and $host-2 at $net.2 (network namespace $ns), the shared filesystem at $shared"
        say "submit with SLURM_CONF=$conf sbatch (partition local), MEMATTN_HEAD_INTERFACE=$veth_host in the job's environment and its --output under $shared"
    fi
}

case $action in
    start) start ;;
    stop) stop ;;
    status) status ;;
esac
