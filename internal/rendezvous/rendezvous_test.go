package rendezvous

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl/transport/tcp"
)

// TestKeys: the store keys and handshake ids of each epoch. Init's world
// (generation 0, shrink epoch 0) has the keys it had before epochs
// existed; every other epoch has keys and a handshake id of its own, so
// that a stale rank of an older epoch meets no one; a process's alive key
// is the job's, whatever the epoch.
func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		gen, shrink int
		epoch       string
		addr        string // rank 1's TCP address in the epoch's view of the store
		handshake   string
		shrinkKey   string
		segment     string
	}{
		{0, 0, "", "goccl/j:1//tcp/addr/1", "j:1", "goccl/j:1/shrink/joined", "j_1."},
		{0, 1, "g0.s1/", "goccl/j:1/g0.s1//tcp/addr/1", "j:1/g0.s1", "goccl/j:1/g0.s1/shrink/joined", "j_1.g0.s1_"},
		{0, 2, "g0.s2/", "goccl/j:1/g0.s2//tcp/addr/1", "j:1/g0.s2", "goccl/j:1/g0.s2/shrink/joined", "j_1.g0.s2_"},
		{1, 0, "g1.s0/", "goccl/j:1/g1.s0//tcp/addr/1", "j:1/g1.s0", "goccl/j:1/g1.s0/shrink/joined", "j_1.g1.s0_"},
		{3, 2, "g3.s2/", "goccl/j:1/g3.s2//tcp/addr/1", "j:1/g3.s2", "goccl/j:1/g3.s2/shrink/joined", "j_1.g3.s2_"},
	} {
		r := &Rendezvous{Config: Config{JobID: "j:1", JobRank: 2, JobSize: 4}, Gen: tc.gen, Shrink: tc.shrink}
		if got := r.Epoch(); got != tc.epoch {
			t.Errorf("g%d s%d: Epoch() = %q, want %q", tc.gen, tc.shrink, got, tc.epoch)
		}
		rec := &counted{memStore: newMemStore()}
		r.st = &shared{st: rec}
		if err := r.epochStore().Set(t.Context(), tcp.AddrKey(1), nil); err != nil {
			t.Fatal(err)
		}
		if got := slices.Collect(maps.Keys(rec.kv)); !slices.Equal(got, []string{tc.addr}) {
			t.Errorf("g%d s%d: the epoch's address key is %q, want %q", tc.gen, tc.shrink, got, tc.addr)
		}
		if got := r.handshakeJob(); got != tc.handshake {
			t.Errorf("g%d s%d: handshake job = %q, want %q", tc.gen, tc.shrink, got, tc.handshake)
		}
		if got := r.Round().Key("joined"); got != tc.shrinkKey {
			t.Errorf("g%d s%d: shrink key = %q, want %q", tc.gen, tc.shrink, got, tc.shrinkKey)
		}
		if got := r.segmentJob(); got != tc.segment {
			t.Errorf("g%d s%d: segment job = %q, want %q", tc.gen, tc.shrink, got, tc.segment)
		}
		if got, want := r.AliveKey(3), "goccl/j:1/alive/3"; got != want {
			t.Errorf("g%d s%d: AliveKey(3) = %q, want %q", tc.gen, tc.shrink, got, want)
		}
		if got, want := r.genKey(), "goccl/j:1/gen"; got != want {
			t.Errorf("genKey() = %q, want %q", got, want)
		}
	}
}

// TestNext: a new epoch keeps the job and settings, holds the store once
// more, and the last Release closes it.
func TestNext(t *testing.T) {
	st := &closeCount{}
	r := New(st, Config{JobID: "j", JobRank: 1, JobSize: 3, Streams: 2})
	if !slices.Equal(r.JobRanks(), []int{0, 1, 2}) {
		t.Errorf("JobRanks() = %v", r.JobRanks())
	}
	n := r.Next(0, 1, []int{0, 1})
	if n.Gen != 0 || n.Shrink != 1 || n.JobID != "j" || n.Streams != 2 || !slices.Equal(n.JobRanks(), []int{0, 1}) {
		t.Errorf("Next: %+v", n)
	}
	if r.Epoch() != "" || n.Epoch() != "g0.s1/" {
		t.Errorf("epochs %q and %q", r.Epoch(), n.Epoch())
	}
	r.Release()
	if st.closed != 0 {
		t.Fatalf("store closed while the next epoch holds it")
	}
	n.Release()
	if st.closed != 1 {
		t.Fatalf("store closed %d times after the last release, want 1", st.closed)
	}
}

type closeCount struct {
	counted
	closed int
}

func (c *closeCount) Close() error { c.closed++; return nil }

// TestChoose: the transport to each peer, given the transport asked for,
// the ranks on this rank's host, whether they have room for shared memory
// and whether every rank has InfiniBand.
func TestChoose(t *testing.T) {
	const size = 6
	for _, tc := range []struct {
		name  string
		kind  string
		rank  int
		local []int
		room  bool // the host has room: a nonce
		ib    bool
		via   string // per peer 0..5, "s" shm, "t" tcp, "i" ib
		err   string
	}{
		{"tcp", "tcp", 2, nil, false, false, "tttttt", ""},
		{"tcp ignores ib", "tcp", 2, nil, false, true, "tttttt", ""},
		{"ib", "ib", 2, nil, false, false, "iiiiii", ""},
		{"auto one host", "auto", 2, []int{0, 1, 2, 3, 4, 5}, true, false, "ssssss", ""},
		{"auto one host with ib", "", 2, []int{0, 1, 2, 3, 4, 5}, true, true, "ssssss", ""},
		{"auto two hosts", "auto", 4, []int{3, 4, 5}, true, false, "tttsss", ""},
		{"auto two hosts with ib", "auto", 4, []int{3, 4, 5}, true, true, "iiisss", ""},
		{"auto uneven hosts", "auto", 0, []int{0, 2}, true, false, "ststtt", ""},
		{"auto alone on its host", "auto", 5, []int{5}, true, false, "tttttt", ""},
		{"auto no room", "auto", 1, []int{0, 1, 2}, false, false, "tttttt", ""},
		{"auto no room with ib", "auto", 1, []int{0, 1, 2}, false, true, "iiiiii", ""},
		{"auto one host no room", "auto", 1, []int{0, 1, 2, 3, 4, 5}, false, false, "tttttt", ""},
		{"shm", "shm", 3, []int{0, 1, 2, 3, 4, 5}, true, false, "ssssss", ""},
		{"shm other hosts", "shm", 1, []int{0, 1, 4}, true, false, "", "transport shm: ranks [2 3 5] are not on this host (h)"},
		{"shm no room", "shm", 1, []int{0, 1, 2, 3, 4, 5}, false, false, "", "no room in shared memory for the rings of this host's 6 ranks (rank 4 measured it"},
	} {
		h := Host{ID: "h", Local: tc.local, First: 4}
		if tc.room {
			h.Nonce = "n"
		}
		c, err := choose(tc.kind, tc.rank, size, h, tc.ib)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var b strings.Builder
		for p := range size {
			b.WriteByte(map[string]byte{"shm": 's', "tcp": 't', "ib": 'i', "": '-'}[c.Via(p)])
		}
		if b.String() != tc.via {
			t.Errorf("%s: via %s, want %s (%+v)", tc.name, b.String(), tc.via, c)
		}
		// A rank is reached by shared memory only with its host's other
		// ranks, and a mesh is made exactly when some rank is not.
		if c.Shm != nil && !slices.Contains(c.Shm, tc.rank) {
			t.Errorf("%s: shared memory %v without this rank", tc.name, c.Shm)
		}
		if (c.Mesh != "") != (len(c.Shm) < size) {
			t.Errorf("%s: mesh %q with shared memory to %v", tc.name, c.Mesh, c.Shm)
		}
	}
}
