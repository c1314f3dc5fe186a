#!/usr/bin/env bash
# goccl across emulated hosts (issue 37). Builds H hosts of L ranks on this
# machine: each host a network namespace whose one link (a veth pair) goes
# to a bridge in one more namespace, the link shaped with htb to RATE each
# way (the host's egress on its end, its ingress on the bridge's end) and,
# with -delay, a one-way delay on every packet between two hosts, and
# each rank a process in its host's namespace and in a UTS namespace of its
# own named for its host, so goccl.Init finds the hosts by host identity as
# on real machines: shared memory within a host, TCP between hosts, L ranks
# a host in the cost model (TestHosts in hosts_test.go is the CI short
# form). Every rank runs `goccl bench -join -transport auto` under
# torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT), ROUNDS times, and the script prints, per size,
# nccl-tests' columns (median over the rounds of the loop-average time,
# algbw and busbw from it, the algorithm of the last round) and the figure
# as a fraction of the link limit: the least time the links allow, in
# which each host's link must carry, each way,
#   allreduce                  2(H-1)/H x size
#   allgather, reducescatter    (H-1)/H x size   (size as nccl-tests: the whole buffer)
# (other -op: "-"). Everything it makes (namespaces, veths, bridge, the
# rank processes) is removed on any exit.
#
#   scripts/hosts-bench.sh [flags]
#     -H hosts (2)  -L ranks a host (2)  -rate htb rate each way (2gbit)
#     -delay one-way delay between hosts, a Go duration (0: none; e.g. 100us)
#     -b smallest size (8)  -e largest size (256M)  -f factor (2)
#     -op collective (allreduce)  -algo family (goccl bench -algo; default: the model's pick)
#     -rounds rounds (3)  -w warm-up (5)
#     -iters timed iterations (20)  -check (validate, #wrong column)
#     -keep-going (a failed round is reported, the others still count)
#     -mpi (Open MPI beside goccl, tuned and HAN)  -gloo (torch.distributed's gloo beside goccl)
#
# Needs root, iproute2 (ip, tc with htb), util-linux's unshare, hostname,
# go, awk, sort; -delay needs iptables and the kernel's NFQUEUE target;
# -mpi Open MPI's mpicc and mpirun; -gloo a Python with torch (PYTHON, else
# python3, else /usr/bin/python3: Debian's python3-torch). -mpi and -gloo
# run allreduce, allgather and reducescatter only (gloo: no reducescatter).
# Sizes are per rank as goccl bench takes them.
#
# The delay (-delay): the kernels this runs on have no sch_netem, so each
# host's outgoing packets are queued (iptables NFQUEUE, mangle POSTROUTING
# on eth0) to cmd/goccl-delayq in the host's namespace, which holds each
# for the delay and lets it on to htb. The holder's own pass (the kernel
# waking it, the verdict) costs about 15-35 us one way here: the script
# measures it with a TCP ping-pong between host 0 and host 1, 7 pairs of
# round trips with holders at 0 and with none, alternated; asks the
# holders for the delay less the median pair's difference; measures 7
# pairs again, and prints every pair and the one-way delay it got (85-122
# us for 100 us in five runs on this machine, whose round trips drift:
# read a run's table with the delay it printed; -rounds 0 runs this
# alone). The holders run at nice -10, since a link's delay should not
# wait on the ranks' CPU time. At the end each holder prints its counts
# and how late its releases came while the bench ran (median, p90, worst).
# The of_limit column counts the links' rate only, not the delay.
# DELAY_CMD, when set, is run once per host namespace after shaping, with
# $NS, $DEV and $H set, for a kernel that has netem, e.g.
#   DELAY_CMD='tc qdisc add dev $DEV parent 1:10 handle 10: netem delay 100us'
#
# Open MPI (-mpi): scripts/hosts-bench-mpi.c, built with mpicc, times the
# same collective at the same sizes the same way (loop average, mean over
# ranks) out of place, under mpirun with each host namespace a node of its
# own: a hostfile of the hosts' addresses, L slots each, and an rsh agent
# that enters the host's network namespace and a UTS namespace named for
# it where Open MPI would ssh. Twice: ompi:tuned (Open MPI's default
# choice, coll tuned) and ompi:han (coll_han_priority 100, the two-level
# collectives; 4.1's HAN has no reduce-scatter and leaves it to tuned).
# btl self,vader,tcp on eth0, mpi_yield_when_idle 1 (the ranks share the
# machine's cores). The program prints where the ranks ran (host names,
# ranks on rank 0's node) so the layout can be checked. Within each round
# the paths run one after another, each round starting one path further
# on, and the table has a row a path at each size, the algo column naming
# the path.
#
# Gloo (-gloo): scripts/hosts-bench-gloo.py, one rank a process in its
# host's namespaces under the same variables as goccl's, torch.distributed
# with the gloo backend (GLOO_SOCKET_IFNAME=eth0), timed the same way:
# all_reduce in place, all_gather into a tensor a rank (this torch's gloo
# has neither all_gather_into_tensor nor reduce-scatter; with -op
# reducescatter gloo is left out). Gloo's ranks talk TCP to each other on
# one host too (over lo). Sizes that round to nothing are left out (gloo's
# allgather of empty blocks dies of SIGFPE).
set -euo pipefail
cd "$(dirname "$0")/.."

H=2 L=2 RATE=2gbit DELAY=0 B=8 E=256M F=2 OP=allreduce ALGO= ROUNDS=3 W=5 ITERS=20 CHECK= KEEP= MPI= GLOO=
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift ;;
	-delay) DELAY=$2; shift ;;
	-L) L=$2; shift ;;
	-rate) RATE=$2; shift ;;
	-b) B=$2; shift ;;
	-e) E=$2; shift ;;
	-f) F=$2; shift ;;
	-op) OP=$2; shift ;;
	-algo) ALGO=$2; shift ;;
	-rounds) ROUNDS=$2; shift ;;
	-w) W=$2; shift ;;
	-iters) ITERS=$2; shift ;;
	-check) CHECK=-check ;;
	-keep-going) KEEP=1 ;;
	-mpi) MPI=1 ;;
	-gloo) GLOO=1 ;;
	-h | -help | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "hosts-bench: unknown flag $1 (-h for usage)" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "hosts-bench: needs root (network and UTS namespaces, tc)" >&2; exit 1; }
for p in ip tc unshare hostname go awk; do
	command -v $p >/dev/null || { echo "hosts-bench: needs $p" >&2; exit 1; }
done
N=$((H * L))
[ "$H" -ge 2 ] && [ "$L" -ge 1 ] || { echo "hosts-bench: needs -H >= 2 and -L >= 1" >&2; exit 2; }
# A Go duration (100us, 0.5ms) in microseconds.
us() {
	awk -v s="$1" 'BEGIN { v = s + 0; u = s; sub(/^[0-9.]+/, "", u)
		m = (u == "ns") ? 1e-3 : (u == "us" || u == "µs") ? 1 : (u == "ms") ? 1e3 : (u == "s") ? 1e6 : (u == "" && v == 0) ? 1 : -1
		if (m < 0) exit 1; printf "%.1f\n", v * m }'
}
# A size as goccl bench takes it (8, 64K, 256M, 1G) in bytes.
bytes() {
	awk -v s="$1" 'BEGIN { v = s + 0; u = toupper(s); sub(/^[0-9]+/, "", u)
		m = (u == "") ? 1 : (u == "K") ? 1024 : (u == "M") ? 1048576 : (u == "G") ? 1073741824 : -1
		if (m < 0) exit 1; printf "%d\n", v * m }'
}
for x in "$B" "$E"; do bytes "$x" >/dev/null || { echo "hosts-bench: size $x: give bytes, or K, M, G" >&2; exit 2; }; done
if [ -n "$MPI" ]; then
	for p in mpicc mpirun; do
		command -v $p >/dev/null || { echo "hosts-bench: -mpi needs $p (Debian: openmpi-bin, libopenmpi-dev)" >&2; exit 1; }
	done
fi
if [ -n "$GLOO" ]; then
	# Debian's torch is the system Python's; a python3 earlier in PATH
	# (pyenv, a venv) may lack it.
	PY=
	for p in ${PYTHON:-python3 /usr/bin/python3}; do
		if "$p" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then PY=$p; break; fi
	done
	[ -n "$PY" ] || { echo "hosts-bench: -gloo needs a Python with torch and its gloo backend (Debian: python3-torch; PYTHON=... names one)" >&2; exit 1; }
fi
if [ -n "$MPI$GLOO" ]; then
	case $OP in
	allreduce | allgather | reducescatter) ;;
	*) echo "hosts-bench: -mpi and -gloo run allreduce, allgather and reducescatter only, not -op $OP" >&2; exit 2 ;;
	esac
fi
delay_us=$(us "$DELAY") || { echo "hosts-bench: -delay $DELAY: give a duration such as 100us" >&2; exit 2; }
if [ "$delay_us" != 0.0 ]; then
	command -v iptables >/dev/null || { echo "hosts-bench: -delay needs iptables (apt-get install iptables)" >&2; exit 1; }
fi

id=ghb$$
hub=$id-hub
tmp=$(mktemp -d)
pids=()
nss=()
hosts=()   # host namespaces with the delay's rule
holders=() # goccl-delayq processes, one a host
pong=      # the calibration's echo
qrule="-o eth0 -j NFQUEUE --queue-num 0 --queue-bypass"
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	# The delay: the rules first, so that nothing more is queued, then
	# the holders, which accept what they hold on SIGTERM.
	for ns in "${hosts[@]}"; do ip netns exec "$ns" iptables -t mangle -D POSTROUTING $qrule 2>/dev/null || true; done
	for p in "${holders[@]}" $pong; do kill "$p" 2>/dev/null || true; done
	# Anything still running in the namespaces this script made.
	for ns in "${nss[@]}"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
	done
	for ns in "${nss[@]}"; do ip netns del "$ns" 2>/dev/null || true; done # the hub's veths and bridge go with it
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$tmp/goccl" ./cmd/goccl
[ "$delay_us" = 0.0 ] || go build -o "$tmp/goccl-delayq" ./cmd/goccl-delayq

# The bridge, then a host namespace a host, each on one veth pair:
# hN:eth0 <-> hub:pN, both ends shaped (eth0's egress is the host's upload,
# pN's egress its download).
shape() { # ns dev
	ip netns exec "$1" tc qdisc add dev "$2" root handle 1: htb default 10
	ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$RATE" ceil "$RATE" quantum 60000
}
ip netns add "$hub"; nss+=("$hub")
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
subnet=10.232.$(($$ % 250))
for h in $(seq 0 $((H - 1))); do
	ns=$id-h$h
	ip netns add "$ns"; nss+=("$ns")
	ip -n "$hub" link add p$h type veth peer name eth0 netns "$ns"
	ip -n "$hub" link set p$h master br0
	ip -n "$hub" link set p$h up
	ip -n "$ns" addr add $subnet.$((h + 1))/24 dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
	shape "$ns" eth0
	shape "$hub" p$h
	if [ -n "${DELAY_CMD:-}" ]; then
		NS=$ns DEV=eth0 H=$h ip netns exec "$ns" sh -c "$DELAY_CMD"
	fi
done
master=$subnet.1

# The delay between hosts: every packet a host sends on its link is queued
# (NFQUEUE) to a goccl-delayq in the host's namespace, which holds it and
# then lets it on to htb. Each direction between two hosts passes one
# holder, the sender's, so the one-way delay is the holder's. Only eth0's
# egress: ranks of one host talk over shared memory or lo, which stay
# undelayed, and the bridge namespace needs no br_netfilter. The holder's
# own pass (the kernel waking it, the verdict) is measured with a TCP
# ping-pong between host 0 and host 1 and taken off the delay it is asked
# for. --queue-bypass lets packets through while no holder is bound.
delay_note="no delay between hosts"
stop_holders() { # each prints what it did to its log as it exits
	for p in "${holders[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	holders=()
}
start_holders() { # delay in us
	local h
	stop_holders
	for h in $(seq 0 $((H - 1))); do
		# nice -10: the holder's own use of CPU is small.
		ip netns exec "$id-h$h" nice -n -10 "$tmp/goccl-delayq" -queue 0 -delay "$1us" 2>"$tmp/delayq-h$h.log" &
		holders+=($!)
	done
	sleep 0.1 # bound before the next packet, or it passes undelayed (bypass)
	for h in $(seq 0 $((H - 1))); do
		kill -0 "${holders[$h]}" 2>/dev/null || { echo "hosts-bench: goccl-delayq in host $h failed:" >&2; cat "$tmp/delayq-h$h.log" >&2; exit 1; }
	done
}
rtt() { ip netns exec "$id-h0" "$tmp/goccl-delayq" ping -n 500 -w 100 "$subnet.2:29400"; } # median min p90, us
# Round trips with holders at $1 us and with none, in 7 alternated pairs:
# this machine's round trips drift from one second to the next (the
# no-holder one's median between about 20 and 60 us), so each pair is
# taken close together and the median pair counts. Sets pair_med, the
# median of the pairs' one-way differences, and pair_rows, the holders'
# and the no-holder median round trips of each pair. Not in a subshell:
# it starts the holders that the script must keep track of.
pairs() {
	local i with without diffs=
	pair_rows=
	for i in 1 2 3 4 5 6 7; do
		stop_holders
		without=$(rtt)
		start_holders "$1"
		with=$(rtt)
		diffs="$diffs $(awk -v a="${without%% *}" -v b="${with%% *}" 'BEGIN { print (b - a) / 2 }')"
		pair_rows="$pair_rows ${with%% *}/${without%% *}"
	done
	pair_med=$(echo $diffs | tr ' ' '\n' | sort -g | sed -n 4p)
}
if [ "$delay_us" != 0.0 ]; then
	ip netns exec "$id-h1" "$tmp/goccl-delayq" pong "$subnet.2:29400" &
	pong=$!
	# The rules go in first: with no holder bound they let packets by
	# (--queue-bypass), which is the no-holder case.
	for h in $(seq 0 $((H - 1))); do
		ip netns exec "$id-h$h" iptables -t mangle -A POSTROUTING $qrule
		hosts+=("$id-h$h")
	done
	echo "# delay: TCP ping-pong host 0 <-> host 1, median round trip in us with holders / with none, 7 pairs alternated, and the median pair's one-way difference:"
	pairs 0
	echo "# delay:   holders at 0us:$pair_rows: ${pair_med}us, the holder's pass"
	ask=$(awk -v d="$delay_us" -v p="$pair_med" 'BEGIN { a = d - (p > 0 ? p : 0); printf "%.1f", (a > 0 ? a : 0) }')
	pairs "$ask"
	echo "# delay:   holders at ${ask}us (${delay_us}us less the pass):$pair_rows: ${pair_med}us"
	got=$pair_med
	kill "$pong"; wait "$pong" 2>/dev/null || true; pong=
	delay_note="${delay_us}us one way between hosts (NFQUEUE holders asked ${ask}us, measured ${got}us)"
	# Fresh holders for the bench, so that their logs count its packets only.
	start_holders "$ask"
fi

# The emulated hosts share this machine's cores, which no rank can tell
# from its launcher (each host has L ranks): where H x L exceeds them the
# ranks wait as on an oversubscribed host (GOCCL_SPIN=yield, polls that
# yield the core), as Open MPI is run with mpi_yield_when_idle, and with
# GOMAXPROCS 1, as goccl run gives a rank its share of the cores (at
# least one P). A GOCCL_SPIN or GOMAXPROCS in the environment wins.
spin=${GOCCL_SPIN:-}
procs=${GOMAXPROCS:-}
if [ $((H * L)) -gt "$(nproc)" ]; then
	[ -n "$spin" ] || spin=yield
	[ -n "$procs" ] || procs=1
fi

paths=goccl
[ -z "$MPI" ] || paths="$paths ompi-tuned ompi-han"
[ -z "$GLOO" ] || [ "$OP" = reducescatter ] || paths="$paths gloo"
echo "# hosts-bench: $H hosts x $L ranks, each host's link $RATE each way (htb), $delay_note;" \
	"$OP, $W warm-up + $ITERS timed iterations a size, median of $ROUNDS rounds; paths: $paths, alternated within each round"
echo "# goccl: goccl bench -join -transport auto${ALGO:+ -algo $ALGO}, GOCCL_SPIN=${spin:-default}, GOMAXPROCS=${procs:-default}$([ "$OP" = allreduce ] && echo ", in place")"
[ -z "$GLOO" ] || [ "$OP" != reducescatter ] || echo "# gloo: left out, torch $("$PY" -c 'import torch; print(torch.__version__)')'s gloo has no reduce-scatter"
[ -z "$GLOO" ] || [ "$OP" = reducescatter ] || echo "# gloo: torch.distributed's gloo backend from $PY, TCP between every two ranks (over lo within a host), $([ "$OP" = allreduce ] && echo "all_reduce in place" || echo "all_gather (a tensor a rank)")"
[ -z "$MPI" ] || echo "# ompi-*: Open MPI $(mpirun --version 2>/dev/null | sed -n 's/.*Open MPI) //p' | head -1), a node a host (hostfile, rsh agent into the namespace), pml ob1, btl self,vader,tcp, mpi_yield_when_idle 1, out of place; ompi-han: coll_han_priority 100 (reduce-scatter is tuned's under it: 4.1's HAN has none)"

# One round of goccl or Gloo: every rank, rank r on host r/L, a process
# in its host's network namespace and in a UTS namespace named for the
# host, under torchrun's variables; rank 0's output to $1.
inhost() { # h command...: run in host h
	local h=$1
	shift
	ip netns exec "$id-h$h" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "goccl-host$h" "$@"
}
run_ranks() { # out port name command...
	local out=$1 port=$2 name=$3 r h
	shift 3
	pids=()
	for r in $(seq 0 $((N - 1))); do
		h=$((r / L))
		inhost "$h" env -u GOCCL_TRANSPORT -u GOCCL_ALGO \
			RANK=$r WORLD_SIZE=$N LOCAL_RANK=$((r % L)) LOCAL_WORLD_SIZE=$L \
			MASTER_ADDR=$master MASTER_PORT=$port GOCCL_IFNAME=eth0 GOCCL_SPIN=$spin GOMAXPROCS=$procs GLOO_SOCKET_IFNAME=eth0 \
			"$@" >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
		pids+=($!)
	done
	local fail=0
	for r in $(seq 0 $((N - 1))); do
		if ! wait "${pids[$r]}"; then
			echo "hosts-bench: $name rank $r failed:" >&2
			tail -5 "$tmp/rank$r.err" >&2
			fail=1
		fi
	done
	pids=()
	cp "$tmp/rank0.out" "$out"
	return $fail
}
run_goccl() { # out port
	run_ranks "$1" "$2" goccl "$tmp/goccl" bench -join -transport auto -op "$OP" -algo "$ALGO" \
		-b "$B" -e "$E" -f "$F" -w "$W" -iters "$ITERS" $CHECK -q -format csv
}
run_gloo() { # out port
	run_ranks "$1" "$2" gloo "$PY" -B "$PWD/scripts/hosts-bench-gloo.py" "$OP" "$(bytes "$B")" "$(bytes "$E")" "$F" "$W" "$ITERS" \
		"$([ -n "$CHECK" ] && echo 1 || echo 0)"
}

# Open MPI: each host namespace is a node of its own. mpirun runs in host
# 0 (which it finds local by its address), the hostfile names the hosts by
# their addresses with L slots each, so ranks fill the hosts in order as
# goccl's do, and the rsh agent enters the named host's namespaces where
# Open MPI would ssh. Both interfaces are eth0, so that nothing goes over
# lo between hosts, and the ranks yield when idle (they share 2 cores).
if [ -n "$MPI" ]; then
	mpicc -O2 -o "$tmp/hosts-bench-mpi" scripts/hosts-bench-mpi.c
	for h in $(seq 0 $((H - 1))); do echo "$subnet.$((h + 1)) slots=$L"; done >"$tmp/hostfile"
	cat >"$tmp/rsh" <<-AGENT
		#!/bin/sh
		# Open MPI calls this as it would ssh: options, a host (a hostfile
		# address, $subnet.(h+1)), then the words of a command for a shell there.
		while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
		h=\$((\${1##*.} - 1))
		shift
		exec ip netns exec "$id-h\$h" unshare --uts -- sh -c 'hostname "\$0" && exec sh -c "\$1"' "goccl-host\$h" "\$*"
	AGENT
	chmod +x "$tmp/rsh"
fi
run_mpi() { # out label [mpirun flags]
	local out=$1 label=$2
	shift 2
	inhost 0 mpirun --allow-run-as-root -np "$N" --hostfile "$tmp/hostfile" --map-by slot --bind-to none \
		--mca plm_rsh_agent "$tmp/rsh" --mca plm_rsh_no_tree_spawn 1 \
		--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
		--mca mpi_yield_when_idle 1 "$@" \
		"$tmp/hosts-bench-mpi" "$OP" "$(bytes "$B")" "$(bytes "$E")" "$F" "$W" "$ITERS" "$label" "$([ -n "$CHECK" ] && echo 1 || echo 0)" \
		>"$out" 2>"$tmp/mpi.err" &
	pids=($!)
	if ! wait "${pids[0]}"; then
		pids=()
		echo "hosts-bench: mpirun ($label) failed:" >&2
		tail -5 "$tmp/mpi.err" >&2
		return 1
	fi
	pids=()
}

# One path of round k into $tmp/PATH.round$k.csv.
run_path() { # path k
	local out=$tmp/$1.round$2.csv
	case $1 in
	goccl) run_goccl "$out" $((29500 + $2)) ;;
	ompi-tuned) run_mpi "$out" ompi:tuned ;;
	ompi-han) run_mpi "$out" ompi:han --mca coll_han_priority 100 ;;
	gloo) run_gloo "$out" $((29600 + $2)) ;;
	esac
}

# The paths alternate within a round, and each round starts one path on
# from the last, so that no path always runs first (or last) on a machine
# whose speed drifts.
read -ra order <<<"$paths"
for k in $(seq 1 "$ROUNDS"); do
	for j in $(seq 0 $((${#order[@]} - 1))); do
		p=${order[$(((j + k - 1) % ${#order[@]}))]}
		if ! run_path "$p" "$k"; then
			[ -n "$KEEP" ] || exit 1
			rm -f "$tmp/$p.round$k.csv"
		fi
	done
	echo "# round $k of $ROUNDS done" >&2
done

if [ ${#holders[@]} -gt 0 ]; then
	stop_holders
	for h in $(seq 0 $((H - 1))); do sed "s/^goccl-delayq:/# delay: host $h's holder:/" "$tmp/delayq-h$h.log"; done
fi

# TCP's own view of the links over the whole run: a retransmission or a
# timeout here is a loss (or a reordering TCP took for one), which costs
# a path far more than the delay does.
for h in $(seq 0 $((H - 1))); do
	ip netns exec "$id-h$h" awk -v h="$h" '
		$1 == "Tcp:" && !names { for (i = 2; i <= NF; i++) col[$i] = i; names = 1; next }
		$1 == "Tcp:" { r = $col["RetransSegs"]; o = $col["OutSegs"] }
		$1 == "TcpExt:" && !xnames { for (i = 2; i <= NF; i++) xcol[$i] = i; xnames = 1; next }
		$1 == "TcpExt:" { t = $xcol["TCPTimeouts"]; l = $xcol["TCPLossProbes"] }
		END { printf "# tcp: host %d sent %d segments, retransmitted %d, %d timeouts, %d loss probes\n", h, o, r, t, l }' /proc/net/snmp /proc/net/netstat
done

# What the other paths said of where their ranks were (first round's).
for p in $paths; do
	for f in "$tmp/$p".round*.csv; do
		[ -e "$f" ] && { grep -h '^#' "$f" || true; break; }
	done
done

# Median over the rounds per path and size, then the table: per size, a
# row a path in the order of -paths. CSV columns, after the path:
# op,ranks,transport,size,count,type,redop,root,algo,time_us,algbw,busbw,wrong,sent_per_rank
for p in $paths; do
	for f in "$tmp/$p".round*.csv; do [ -e "$f" ] && sed "s/^/$p,/" "$f"; done
done | awk -F, -v op="$OP" -v H="$H" -v N="$N" -v rate="$RATE" -v paths="$paths" '
function bits(s,   v, u) { # tc rate to bit/s
	v = s + 0; u = tolower(s); sub(/^[0-9.]+/, "", u)
	if (u ~ /^gbit/) return v * 1e9; if (u ~ /^mbit/) return v * 1e6; if (u ~ /^kbit/) return v * 1e3
	if (u ~ /^bit/ || u == "") return v
	if (u ~ /^gbps/) return v * 8e9; if (u ~ /^mbps/) return v * 8e6; if (u ~ /^kbps/) return v * 8e3
	return v
}
$2 == op { k = $1 SUBSEP $5; n = ++cnt[k]; t[k, n] = $11; row[k] = $0; algo[k] = $10; wrong[k] += $14; if (!($5 in seen)) { seen[$5]; sizes[++ns] = $5 + 0 } }
END {
	Bps = bits(rate) / 8
	f = 0; if (op == "allreduce") f = 2 * (H - 1) / H; else if (op == "allgather" || op == "reducescatter") f = (H - 1) / H
	np = split(paths, pl, " ")
	printf "%12s %12s %8s %6s %6s %12s %8s %8s %7s %-14s %7s %8s\n", "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "algo", "of_limit", "rounds"
	for (i = 2; i <= ns; i++) { x = sizes[i]; for (j = i - 1; j >= 1 && sizes[j] > x; j--) sizes[j + 1] = sizes[j]; sizes[j + 1] = x }
	for (i = 1; i <= ns; i++) for (q = 1; q <= np; q++) {
		s = sizes[i]; k = pl[q] SUBSEP s; n = cnt[k]
		if (n == 0) continue
		for (m = 1; m <= n; m++) tv[m] = t[k, m] + 0
		for (a = 2; a <= n; a++) { x = tv[a]; for (b = a - 1; b >= 1 && tv[b] > x; b--) tv[b + 1] = tv[b]; tv[b + 1] = x }
		med = (n % 2) ? tv[(n + 1) / 2] : (tv[n / 2] + tv[n / 2 + 1]) / 2
		split(row[k], c, ",")
		algbw = (med > 0) ? s / (med * 1e3) : 0
		bus = (c[12] > 0) ? c[13] / c[12] : 1 # the busbw factor the row came with
		lim = (f > 0 && med > 0) ? sprintf("%7.3f", (f * s / Bps) / (med * 1e-6)) : "      -"
		printf "%12d %12d %8s %6s %6s %12.1f %8.3f %8.3f %7d %-14s %s %8d\n", s, c[6], c[7], c[8], c[9], med, algbw, algbw * bus, wrong[k], algo[k], lim, n
	}
}'
