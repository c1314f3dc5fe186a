package rendezvous

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
)

// Host is what a rank learns of its host at the rendezvous.
type Host struct {
	ID    string // the host's identity (hostIdentity)
	Local []int  // the job ranks on this host, sorted
	Nonce string // names the host's segments; "": no room for them
	First int    // the host's first arrival, which made the list
}

// hostGroup finds the ranks that share this rank's host identity id, and
// the nonce that names their shared-memory segments, through st (the
// epoch's keys). Each host's ranks count themselves under a key of their
// own, named after a hash of id:
//
//	host/<h>/n        arrivals at host h (Add)
//	host/<h>/<i>      the rank that arrived i-th (from 0)
//	hosts/arrived     arrivals over the job; the last sets hosts/all
//	host/<h>/list     the nonce and host h's ranks, set by its first
//	                  arrival once every rank has arrived
//
// A rank makes four store round trips (Add, Set, Add, Get of its host's
// list); the job's last arrival one more; each host's first arrival L+1
// more (it reads hosts/all, the count and the other L-1 slots, and sets
// the list, but reads no list: L+5 in all). Over a job of N ranks
// on H hosts that is 4N + 1 + (N+H) = 5N+H+1 requests whatever the
// layout; no rank reads a key of another host, and only the H first
// arrivals wait on hosts/all.
//
// The first arrival also asks room whether its host can hold the rings of
// its ranks; if not, the list's nonce is "-" and hostGroup returns no
// nonce to any rank of that host.
func hostGroup(ctx context.Context, st store.Store, rank, size int, id string, room func(ranks int) error) (Host, error) {
	h, err := hostList(ctx, st, rank, size, id, room)
	if err != nil {
		return Host{}, err
	}
	fields := strings.Fields(string(h))
	if len(fields) < 2 {
		return Host{}, fmt.Errorf("%w: host list %q", transport.ErrProtocol, h)
	}
	info := Host{Local: make([]int, 0, len(fields)-1), Nonce: fields[0]}
	if info.Nonce == "-" {
		info.Nonce = ""
	}
	for _, f := range fields[1:] {
		r, err := strconv.Atoi(f)
		if err != nil || r < 0 || r >= size {
			return Host{}, fmt.Errorf("%w: host list %q", transport.ErrProtocol, h)
		}
		info.Local = append(info.Local, r)
	}
	info.First = info.Local[0]
	slices.Sort(info.Local)
	if len(slices.Compact(slices.Clone(info.Local))) != len(info.Local) || !slices.Contains(info.Local, rank) {
		return Host{}, fmt.Errorf("%w: host list %q for rank %d", transport.ErrProtocol, h, rank)
	}
	return info, nil
}

// hostList returns the list of hostGroup's doc: a nonce (or "-") and the
// host's ranks, the first arrival first.
func hostList(ctx context.Context, st store.Store, rank, size int, id string, room func(ranks int) error) ([]byte, error) {
	sum := sha256.Sum256([]byte(id))
	hk := "host/" + hex.EncodeToString(sum[:12])
	i, err := st.Add(ctx, hk+"/n", 1)
	if err != nil {
		return nil, err
	}
	if err := st.Set(ctx, hk+"/"+strconv.FormatInt(i-1, 10), []byte(strconv.Itoa(rank))); err != nil {
		return nil, err
	}
	arrived, err := st.Add(ctx, "hosts/arrived", 1)
	if err != nil {
		return nil, err
	}
	if arrived == int64(size) {
		if err := st.Set(ctx, "hosts/all", []byte("1")); err != nil {
			return nil, err
		}
	}
	if i > 1 {
		return st.Get(ctx, hk+"/list")
	}
	// This host's first arrival lists its ranks once all have come.
	if _, err := st.Get(ctx, "hosts/all"); err != nil {
		return nil, err
	}
	n, err := getInt(ctx, st, hk+"/n")
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if n > 1 && room != nil && room(int(n)) != nil {
		b.WriteString("-")
	} else {
		b.WriteString(rand.Text())
	}
	for j := range n {
		v := []byte(strconv.Itoa(rank))
		if j > 0 {
			if v, err = st.Get(ctx, hk+"/"+strconv.FormatInt(j, 10)); err != nil {
				return nil, err
			}
		}
		b.WriteByte(' ')
		b.Write(v)
	}
	list := []byte(b.String())
	if err := st.Set(ctx, hk+"/list", list); err != nil {
		return nil, err
	}
	return list, nil
}

// Host blocks.
//
// The cost model that picks an algorithm describes hosts that hold equal,
// contiguous, aligned blocks of ranks (ranks 0..L-1 on one host, L..2L-1
// on the next, as launchers number them); any other layout is modelled as
// one rank a host. Each rank knows only its own host's ranks (hostGroup),
// and all must agree on L: agreeHostBlocks makes them, through the store,
// compute what hostBlocks computes from every rank's host.

// blockOf returns the L of the block that local (a host's job ranks,
// sorted) is, or 0 when they are not an aligned block.
func blockOf(local []int) int {
	l := len(local)
	if l > 0 && local[0]%l == 0 && local[l-1] == local[0]+l-1 {
		return l
	}
	return 0
}

// hostBlocks returns the ranks a host when the hosts hold aligned blocks
// of equal size, and 1 otherwise, given the host of each job rank (any
// comparable name): what the ranks of a job agree on at Init, which no
// rank computes this way (it would read every rank's host).
func hostBlocks[H comparable](hosts []H) int {
	if len(hosts) == 0 {
		return 1
	}
	local := map[H][]int{}
	for r, h := range hosts {
		local[h] = append(local[h], r)
	}
	l := blockOf(local[hosts[0]])
	for _, rs := range local {
		if b := blockOf(rs); b == 0 || b != l {
			return 1
		}
	}
	return l
}

// agreeHostBlocks returns L when every host holds an aligned block of L
// ranks (local is this rank's host's job ranks, sorted), and 1 otherwise.
// Every rank of the job calls it once, after hostGroup: each adds itself
// to the counter of the L it sees ("-" for a layout that is not a block),
// passes a barrier, and reads its counter; L holds when all size ranks
// counted it, and then every rank reads the same answer. Three store calls
// a rank and one wait, like hostGroup.
func agreeHostBlocks(ctx context.Context, st store.Store, local []int, size int) (int, error) {
	l := blockOf(local)
	key := "hosts/blocks/-"
	if l > 0 {
		key = "hosts/blocks/" + strconv.Itoa(l)
	}
	if _, err := st.Add(ctx, key, 1); err != nil {
		return 0, err
	}
	arrived, err := st.Add(ctx, "hosts/blocked", 1)
	if err != nil {
		return 0, err
	}
	if arrived == int64(size) {
		if err := st.Set(ctx, "hosts/blocked/all", []byte("1")); err != nil {
			return 0, err
		}
	}
	if _, err := st.Get(ctx, "hosts/blocked/all"); err != nil {
		return 0, err
	}
	n, err := st.Add(ctx, key, 0)
	if err != nil {
		return 0, err
	}
	if n == int64(size) && l > 0 {
		return l, nil
	}
	return 1, nil
}

// segmentJob makes a job id fit a shared-memory segment's file name:
// letters, digits, '.', '_' and '-' only, at most 64 bytes (a longer one
// keeps its start and a hash of the whole).
func segmentJob(job string) string {
	b := []byte(job)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		sum := sha256.Sum256([]byte(job))
		b = append(b[:47], '~')
		b = hex.AppendEncode(b, sum[:8])
	}
	return string(b)
}

// others lists the ranks of [0, size) not in sorted.
func others(sorted []int, size int) []int {
	var out []int
	for r := range size {
		if _, found := slices.BinarySearch(sorted, r); !found {
			out = append(out, r)
		}
	}
	return out
}

// formatRanks writes ranks as "[0 1 2]", the first n of them only
// ("[0 1 ... (10 in all)]").
func formatRanks(ranks []int, n int) string {
	if len(ranks) <= n {
		return fmt.Sprint(ranks)
	}
	return strings.TrimSuffix(fmt.Sprint(ranks[:n]), "]") + fmt.Sprintf(" ... (%d in all)]", len(ranks))
}

// shmConfig is what Connect gives transport/shm (Linux only).
type shmConfig struct {
	rank, size int
	job, nonce string
	spin       time.Duration // 0: shm's default; negative: none
	yield      bool          // shm.Config.Yield
	help       bool          // shm.Config.Help
	standBack  bool          // shm.Config.StandBack (only with help)
}

// GroupBlocks returns how many ranks of a group sit on each host when the
// world has perHost ranks a host in aligned blocks and the group's ranks
// are world (in group order): g when the group's ranks come in runs of g
// on one host each, every host in one run, and 1 (no blocks the model
// knows) otherwise.
func GroupBlocks(perHost int, world []int) int {
	if perHost <= 1 || len(world) == 0 {
		return 1
	}
	g, run := 0, 0
	seen := map[int]bool{}
	for i, w := range world {
		h := w / perHost
		if i > 0 && h == world[i-1]/perHost {
			run++
			continue
		}
		if i > 0 {
			if g == 0 {
				g = run
			} else if run != g {
				return 1
			}
		}
		if seen[h] {
			return 1
		}
		seen[h] = true
		run = 1
	}
	if g == 0 {
		return run // one host
	}
	if run != g {
		return 1
	}
	return g
}
