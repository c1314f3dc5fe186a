#!/usr/bin/env bash
# goccl across emulated hosts (issue 37). Builds H hosts of L ranks on this
# machine: each host a network namespace whose one link (a veth pair) goes
# to a bridge in one more namespace, the link shaped with htb to RATE each
# way (the host's egress on its end, its ingress on the bridge's end), and
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
#     -b smallest size (8)  -e largest size (256M)  -f factor (2)
#     -op collective (allreduce)  -algo family (goccl bench -algo; default: the model's pick)
#     -rounds rounds (3)  -w warm-up (5)
#     -iters timed iterations (20)  -check (validate, #wrong column)
#     -keep-going (a failed round is reported, the others still count)
#
# Needs root, iproute2 (ip, tc with htb), util-linux's unshare, hostname,
# go, awk, sort. Sizes are per rank as goccl bench takes them.
#
# TODO(issue 37): a one-way delay between the hosts. This kernel has no
# sch_netem; a delay needs either netem (modprobe sch_netem where it
# exists: `tc qdisc add dev eth0 parent 1:10 netem delay 100us` under the
# htb class) or a user-space delayer (iptables NFQUEUE, ~25 us a pass of
# its own to calibrate away). DELAY_CMD, when set, is run once per host
# namespace after shaping, with $NS, $DEV and $H set, e.g.
#   DELAY_CMD='tc qdisc add dev $DEV parent 1:10 handle 10: netem delay 100us'
# Open MPI and Gloo beside goccl (issue 37) are not in this script yet.
set -euo pipefail
cd "$(dirname "$0")/.."

H=2 L=2 RATE=2gbit B=8 E=256M F=2 OP=allreduce ALGO= ROUNDS=3 W=5 ITERS=20 CHECK= KEEP=
while [ $# -gt 0 ]; do
	case $1 in
	-H) H=$2; shift ;;
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

id=ghb$$
hub=$id-hub
tmp=$(mktemp -d)
pids=()
nss=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
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

# The emulated hosts share this machine's cores, which no rank can tell
# from its launcher (each host has L ranks): where H x L exceeds them the
# ranks wait as on an oversubscribed host (GOCCL_SPIN=yield, polls that
# yield the core), as Open MPI is run with mpi_yield_when_idle. A
# GOCCL_SPIN in the environment wins.
spin=${GOCCL_SPIN:-}
if [ -z "$spin" ] && [ $((H * L)) -gt "$(nproc)" ]; then spin=yield; fi

echo "# hosts-bench: $H hosts x $L ranks, each host's link $RATE each way (htb), no delay between hosts;" \
	"goccl bench -join -transport auto -op $OP${ALGO:+ -algo $ALGO}, GOCCL_SPIN=${spin:-default}, $W warm-up + $ITERS timed iterations a size, median of $ROUNDS rounds"

# One round: every rank, rank r on host r/L; rank 0's CSV to $1.
round() {
	local out=$1 port=$2 r h
	pids=()
	for r in $(seq 0 $((N - 1))); do
		h=$((r / L))
		env -u GOCCL_TRANSPORT -u GOCCL_ALGO \
			RANK=$r WORLD_SIZE=$N LOCAL_RANK=$((r % L)) LOCAL_WORLD_SIZE=$L \
			MASTER_ADDR=$master MASTER_PORT=$port GOCCL_IFNAME=eth0 GOCCL_SPIN=$spin \
			ip netns exec "$id-h$h" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "goccl-host$h" \
			"$tmp/goccl" bench -join -transport auto -op "$OP" -algo "$ALGO" -b "$B" -e "$E" -f "$F" -w "$W" -iters "$ITERS" \
			$CHECK -q -format csv >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
		pids+=($!)
	done
	local fail=0
	for r in $(seq 0 $((N - 1))); do
		if ! wait "${pids[$r]}"; then
			echo "hosts-bench: rank $r failed:" >&2
			tail -5 "$tmp/rank$r.err" >&2
			fail=1
		fi
	done
	pids=()
	cp "$tmp/rank0.out" "$out"
	return $fail
}

for k in $(seq 1 "$ROUNDS"); do
	if ! round "$tmp/round$k.csv" $((29500 + k)); then
		[ -n "$KEEP" ] || exit 1
		rm -f "$tmp/round$k.csv"
	fi
	echo "# round $k of $ROUNDS done" >&2
done

# Median over the rounds per size, then the table. CSV columns:
# op,ranks,transport,size,count,type,redop,root,algo,time_us,algbw,busbw,wrong,sent_per_rank
cat "$tmp"/round*.csv | awk -F, -v op="$OP" -v H="$H" -v N="$N" -v rate="$RATE" '
function bits(s,   v, u) { # tc rate to bit/s
	v = s + 0; u = tolower(s); sub(/^[0-9.]+/, "", u)
	if (u ~ /^gbit/) return v * 1e9; if (u ~ /^mbit/) return v * 1e6; if (u ~ /^kbit/) return v * 1e3
	if (u ~ /^bit/ || u == "") return v
	if (u ~ /^gbps/) return v * 8e9; if (u ~ /^mbps/) return v * 8e6; if (u ~ /^kbps/) return v * 8e3
	return v
}
$1 == op { n = ++cnt[$4]; t[$4, n] = $10; row[$4] = $0; algo[$4] = $9; wrong[$4] += $13 }
END {
	Bps = bits(rate) / 8
	f = 0; if (op == "allreduce") f = 2 * (H - 1) / H; else if (op == "allgather" || op == "reducescatter") f = (H - 1) / H
	printf "%12s %12s %8s %6s %6s %12s %8s %8s %7s %-12s %7s %8s\n", "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "algo", "of_limit", "rounds"
	ns = 0; for (s in cnt) sizes[++ns] = s + 0
	for (i = 2; i <= ns; i++) { x = sizes[i]; for (j = i - 1; j >= 1 && sizes[j] > x; j--) sizes[j + 1] = sizes[j]; sizes[j + 1] = x }
	for (i = 1; i <= ns; i++) {
		s = sizes[i]; n = cnt[s]
		for (k = 1; k <= n; k++) tv[k] = t[s, k] + 0
		for (a = 2; a <= n; a++) { x = tv[a]; for (b = a - 1; b >= 1 && tv[b] > x; b--) tv[b + 1] = tv[b]; tv[b + 1] = x }
		med = (n % 2) ? tv[(n + 1) / 2] : (tv[n / 2] + tv[n / 2 + 1]) / 2
		split(row[s], c, ",")
		algbw = (med > 0) ? s / (med * 1e3) : 0
		bus = (c[11] > 0) ? c[12] / c[11] : 1 # the busbw factor goccl bench used
		lim = (f > 0 && med > 0) ? sprintf("%7.3f", (f * s / Bps) / (med * 1e-6)) : "      -"
		printf "%12d %12d %8s %6s %6s %12.1f %8.3f %8.3f %7d %-12s %s %8d\n", s, c[5], c[6], c[7], c[8], med, algbw, algbw * bus, wrong[s], algo[s], lim, n
	}
}'
