package rendezvous

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestSegmentJob(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:29500.":      "127.0.0.1_29500.",
		"job/x g1.s0/":          "job_x_g1.s0_",
		strings.Repeat("j", 70): strings.Repeat("j", 47) + "~",
	} {
		got := segmentJob(in)
		if !strings.HasPrefix(got, want) || len(got) > 64 || strings.ContainsRune(got, '/') {
			t.Errorf("segmentJob(%q) = %q, want %q...", in, got, want)
		}
	}
	if a, b := segmentJob(strings.Repeat("j", 70)+"a"), segmentJob(strings.Repeat("j", 70)+"b"); a == b {
		t.Errorf("two long job ids make one segment name %q", a)
	}
}

// memStore is a store.Store in memory that counts each caller's requests.
type memStore struct {
	mu    sync.Mutex
	cond  *sync.Cond
	kv    map[string][]byte
	calls int
}

func newMemStore() *memStore {
	s := &memStore{kv: map[string][]byte{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// counted is one rank's view of a memStore: it counts that rank's calls.
type counted struct {
	*memStore
	n int
}

func (c *counted) Set(ctx context.Context, key string, v []byte) error {
	c.n++
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kv[key] = slices.Clone(v)
	c.cond.Broadcast()
	return nil
}

func (c *counted) Get(ctx context.Context, key string) ([]byte, error) {
	c.n++
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.kv[key] == nil {
		c.cond.Wait() // the test's ranks all come: no ctx needed
	}
	return c.kv[key], nil
}

func (c *counted) Add(ctx context.Context, key string, d int64) (int64, error) {
	c.n++
	c.mu.Lock()
	defer c.mu.Unlock()
	v, _ := strconv.ParseInt(string(c.kv[key]), 10, 64)
	v += d
	c.kv[key] = []byte(strconv.FormatInt(v, 10))
	c.cond.Broadcast()
	return v, nil
}

func (c *counted) CompareSet(context.Context, string, []byte, []byte) ([]byte, error) {
	return nil, errors.ErrUnsupported
}
func (c *counted) Wait(context.Context, ...string) error        { return errors.ErrUnsupported }
func (c *counted) Delete(context.Context, string) (bool, error) { return false, errors.ErrUnsupported }
func (c *counted) NumKeys(context.Context) (int64, error)       { return 0, errors.ErrUnsupported }
func (c *counted) Close() error                                 { return nil }

// TestHostGroupCost holds hostGroup's doc to its word: the ranks of each
// host find each other and share a nonce no other host has (none where
// there is no room for the rings), a rank makes four store requests, the
// job's last arrival five, each host's first arrival L+5, and the job
// 5N+H+1.
func TestHostGroupCost(t *testing.T) {
	hosts := []string{"a", "b", "a", "c", "a", "b", "a", "b", "a", "c", "a", "b"} // a: 6 ranks, b: 4, c: 2
	size := len(hosts)
	var roomMu sync.Mutex
	var asked []int
	room := func(n int) error {
		roomMu.Lock()
		defer roomMu.Unlock()
		asked = append(asked, n)
		if n == 2 {
			return errors.New("no room") // host c
		}
		return nil
	}
	ms := newMemStore()
	views := make([]*counted, size)
	locals := make([][]int, size)
	nonces := make([]string, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		views[r] = &counted{memStore: ms}
		wg.Go(func() {
			var h Host
			h, errs[r] = hostGroup(t.Context(), views[r], r, size, hosts[r], room)
			locals[r], nonces[r] = h.Local, h.Nonce
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	total := 0
	count := map[int]int{}
	for r := range size {
		var want []int
		for q := range size {
			if hosts[q] == hosts[r] {
				want = append(want, q)
			}
		}
		if !slices.Equal(locals[r], want) {
			t.Errorf("rank %d: host ranks %v, want %v", r, locals[r], want)
		}
		if (nonces[r] == "") != (hosts[r] == "c") {
			t.Errorf("rank %d on host %s: nonce %q", r, hosts[r], nonces[r])
		}
		for q := range size {
			if same := hosts[q] == hosts[r]; same != (nonces[q] == nonces[r]) {
				t.Errorf("ranks %d and %d: nonces %q and %q", r, q, nonces[r], nonces[q])
			}
		}
		total += views[r].n
		count[views[r].n]++
	}
	slices.Sort(asked)
	if !slices.Equal(asked, []int{2, 4, 6}) {
		t.Errorf("room asked for %v ranks, want once per host: [2 4 6]", asked)
	}
	if want := 5*size + 3 + 1; total != want {
		t.Errorf("%d store requests, want 5N+H+1 = %d (requests: ranks %v)", total, want, count)
	}
	// The first arrivals make 11, 9 and 7 requests, the last arrival one
	// more than it would.
	firsts := count[11] + count[12] + count[9] + count[10] + count[7] + count[8]
	if count[4]+count[5] != size-3 || firsts != 3 || count[5]+count[12]+count[10]+count[8] != 1 {
		t.Errorf("requests: ranks %v, want 4 for all but the hosts' first arrivals (11, 9, 7) and one more for the last arrival", count)
	}
}

// hostCases are layouts of ranks on hosts (the host of each job rank) and
// the ranks a host the job agrees on: L for aligned blocks of L, else 1.
var hostCases = []struct {
	name  string
	hosts []string
	want  int
}{
	{"one rank", []string{"a"}, 1},
	{"one host", []string{"a", "a", "a"}, 3},
	{"a rank a host", []string{"a", "b", "c", "d"}, 1},
	{"blocks of 2", []string{"a", "a", "b", "b", "c", "c"}, 2},
	{"blocks of 4", []string{"a", "a", "a", "a", "b", "b", "b", "b"}, 4},
	{"uneven blocks 3+1", []string{"a", "a", "a", "b"}, 1},
	{"uneven blocks 2+3", []string{"a", "a", "b", "b", "b"}, 1},
	{"interleaved", []string{"a", "b", "a", "b"}, 1},
	{"blocks not aligned", []string{"a", "b", "b", "c", "c", "a"}, 1},
	{"a rank out of its block", []string{"a", "a", "b", "a"}, 1},
	{"last host short", []string{"a", "a", "a", "b", "b", "b", "c", "c"}, 1},
	{"same name, other block", []string{"a", "a", "b", "b", "a", "a"}, 1},
}

func TestHostBlocks(t *testing.T) {
	for _, tc := range hostCases {
		if got := hostBlocks(tc.hosts); got != tc.want {
			t.Errorf("%s: hostBlocks(%v) = %d, want %d", tc.name, tc.hosts, got, tc.want)
		}
	}
	if got := hostBlocks([]string(nil)); got != 1 {
		t.Errorf("hostBlocks(nil) = %d, want 1", got)
	}
}

func TestBlockOf(t *testing.T) {
	for _, tc := range []struct {
		local []int
		want  int
	}{
		{[]int{0}, 1}, {[]int{5}, 1}, {[]int{0, 1}, 2}, {[]int{2, 3}, 2}, {[]int{1, 2}, 0},
		{[]int{0, 2}, 0}, {[]int{3, 4, 5}, 3}, {[]int{4, 5, 6}, 0}, {nil, 0},
	} {
		if got := blockOf(tc.local); got != tc.want {
			t.Errorf("blockOf(%v) = %d, want %d", tc.local, got, tc.want)
		}
	}
}

// TestAgreeHostBlocks: the ranks, each knowing only its own host's ranks,
// agree through the store on what hostBlocks computes from all hosts.
func TestAgreeHostBlocks(t *testing.T) {
	for _, tc := range hostCases {
		t.Run(tc.name, func(t *testing.T) {
			size := len(tc.hosts)
			ms := newMemStore()
			got := make([]int, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				var local []int
				for q, h := range tc.hosts {
					if h == tc.hosts[r] {
						local = append(local, q)
					}
				}
				wg.Go(func() { got[r], errs[r] = agreeHostBlocks(t.Context(), &counted{memStore: ms}, local, size) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r, g := range got {
				if g != tc.want {
					t.Errorf("rank %d agreed on %d ranks a host, want %d", r, g, tc.want)
				}
			}
		})
	}
}

func TestGroupBlocks(t *testing.T) {
	for _, tc := range []struct {
		perHost int
		world   []int
		want    int
	}{
		{0, []int{0, 1, 2, 3}, 1},
		{1, []int{0, 1, 2, 3}, 1},
		{4, []int{0, 1, 2, 3, 4, 5, 6, 7}, 4},
		{4, []int{0, 1, 2, 3}, 4},                // one host
		{4, []int{0, 2, 4, 6}, 2},                // even ranks: 2 a host
		{4, []int{1, 2, 5, 6, 9, 10}, 2},         // the middle of each host
		{4, []int{0, 1, 2, 4, 5, 6}, 3},          // 3 of each
		{4, []int{0, 1, 2, 4, 5}, 1},             // 3 then 2
		{4, []int{0, 4, 1, 5}, 1},                // hosts alternate
		{4, []int{0, 1, 4, 5, 2, 3}, 1},          // host 0 in two runs
		{4, []int{4, 5, 6, 7, 0, 1, 2, 3}, 4},    // hosts in another order
		{8, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, 1}, // 8 then 1
	} {
		if got := GroupBlocks(tc.perHost, tc.world); got != tc.want {
			t.Errorf("GroupBlocks(%d, %v) = %d, want %d", tc.perHost, tc.world, got, tc.want)
		}
	}
}
