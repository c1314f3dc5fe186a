package ckpt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stateFor is rank's state at generation gen: awkward, rank-dependent
// lengths (0, 1, primes, not multiples of k), deterministic bytes.
func stateFor(rank, gen int) []byte {
	lens := []int{0, 1, 7, 1031, 64, 4099, 2, 0, 523}
	l := lens[(rank+gen)%len(lens)]
	b := make([]byte, l)
	for i := range b {
		b[i] = byte(i*31 + rank*7 + gen*13 + i>>8)
	}
	return b
}

// run runs f on n in-process ranks with a 30-second limit.
func run(t *testing.T, n int, f func(ctx context.Context, c *goccl.Comm) error) error {
	t.Helper()
	return goccl.RunLocal(testCtx(t), n, f)
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		n    int
		cfg  ckpt.Config
		want ckpt.Config // zero: an error is expected
	}{
		{1, ckpt.Config{}, ckpt.Config{}},
		{2, ckpt.Config{}, ckpt.Config{}},
		{3, ckpt.Config{}, ckpt.Config{DataShards: 1, ParityShards: 1}},
		{4, ckpt.Config{}, ckpt.Config{DataShards: 2, ParityShards: 1}},
		{5, ckpt.Config{}, ckpt.Config{DataShards: 2, ParityShards: 2}},
		{6, ckpt.Config{}, ckpt.Config{DataShards: 3, ParityShards: 2}},
		{9, ckpt.Config{}, ckpt.Config{DataShards: 4, ParityShards: 2}},
		{9, ckpt.Config{ParityShards: 3}, ckpt.Config{DataShards: 4, ParityShards: 3}},
		{6, ckpt.Config{DataShards: 4, ParityShards: 1}, ckpt.Config{DataShards: 4, ParityShards: 1}},
		{6, ckpt.Config{DataShards: 4, ParityShards: 2}, ckpt.Config{}}, // 6 shards, 5 other ranks
		{6, ckpt.Config{ParityShards: 5}, ckpt.Config{}},
		{6, ckpt.Config{DataShards: -1}, ckpt.Config{}},
	} {
		t.Run(fmt.Sprintf("n%d_k%d_m%d", tc.n, tc.cfg.DataShards, tc.cfg.ParityShards), func(t *testing.T) {
			comms, err := goccl.NewLocal(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			s, err := ckpt.New(comms[0], tc.cfg)
			if tc.want == (ckpt.Config{}) {
				if !errors.Is(err, ckpt.ErrConfig) {
					t.Fatalf("New = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Config(); got != tc.want {
				t.Fatalf("Config() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSaveRestore saves two generations on n ranks, drops the memory of the
// ranks in lost, restores, and checks every rank's state byte for byte
// against the second generation.
func TestSaveRestore(t *testing.T) {
	type tc struct {
		n    int
		cfg  ckpt.Config
		lost []int
	}
	var cases []tc
	for n := 3; n <= 9; n++ {
		cases = append(cases,
			tc{n, ckpt.Config{}, nil},
			tc{n, ckpt.Config{}, []int{n - 1}},
			tc{n, ckpt.Config{ParityShards: 1, DataShards: 1}, []int{0}},
		)
		if n >= 5 {
			cases = append(cases, tc{n, ckpt.Config{}, []int{n - 1, 0}}, tc{n, ckpt.Config{}, []int{1, 3}})
		}
		if n >= 7 {
			cases = append(cases, tc{n, ckpt.Config{ParityShards: 3, DataShards: 3}, []int{2, 3, 4}})
		}
	}
	for _, c := range cases {
		for _, a := range apis {
			if !a.anyConfig && c.cfg != (ckpt.Config{}) {
				continue
			}
			t.Run(fmt.Sprintf("%s/n%d_k%d_m%d_lost%v", a.name, c.n, c.cfg.DataShards, c.cfg.ParityShards, c.lost), func(t *testing.T) {
				got := make([][]byte, c.n)
				held := make([]int, c.n)
				err := run(t, c.n, func(ctx context.Context, comm *goccl.Comm) error {
					r := comm.Rank()
					cp, err := a.open(comm, c.cfg)
					if err != nil {
						return err
					}
					defer cp.close()
					for gen := 1; gen <= 2; gen++ {
						if err := cp.Save(ctx, stateFor(r, gen)); err != nil {
							return err
						}
						if g := cp.store().Generation(); g != uint64(gen) {
							return fmt.Errorf("rank %d: generation %d after save %d", r, g, gen)
						}
					}
					if containsInt(c.lost, r) {
						if err := cp.lose(); err != nil {
							return err
						}
					}
					st, err := cp.Restore(ctx)
					if err != nil {
						return err
					}
					got[r] = st
					held[r] = cp.store().HeldBytes()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				checkNoneKept(t)
				for r, st := range got {
					if want := stateFor(r, 2); !bytes.Equal(st, want) {
						t.Errorf("rank %d: restored %d bytes, want %d bytes (equal prefix? %v)", r, len(st), len(want), bytes.HasPrefix(want, st))
					}
				}
				// After Restore the replacements hold shards again.
				for _, r := range c.lost {
					if held[r] == 0 && anyHeld(c.n, r, c.cfg) {
						t.Errorf("replacement rank %d holds no shards after Restore", r)
					}
				}
			})
		}
	}
}

// anyHeld reports whether rank r should hold a non-empty shard of gen 2.
func anyHeld(n, r int, cfg ckpt.Config) bool {
	comms, _ := goccl.NewLocal(n)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	s, _ := ckpt.New(comms[0], cfg)
	km := s.Config().DataShards + s.Config().ParityShards
	for j := 1; j <= km; j++ {
		if len(stateFor((r-j+n)%n, 2)) > 0 {
			return true
		}
	}
	return false
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestTooManyLost loses m+1 = 3 ranks of 6 (defaults: k=3, m=2).
func TestTooManyLost(t *testing.T) {
	const n = 6
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			errs := make([]error, n)
			_ = run(t, n, func(ctx context.Context, comm *goccl.Comm) error {
				r := comm.Rank()
				cp, err := a.open(comm, ckpt.Config{})
				if err != nil {
					return err
				}
				defer cp.close()
				if err := cp.Save(ctx, stateFor(r, 1)); err != nil {
					return err
				}
				if r == 1 || r == 2 || r == 3 {
					if err := cp.lose(); err != nil {
						return err
					}
				}
				_, errs[r] = cp.Restore(ctx)
				return nil
			})
			checkNoneKept(t)
			for r, err := range errs {
				if !errors.Is(err, ckpt.ErrTooManyLost) || !strings.Contains(err.Error(), "[1 2 3]") {
					t.Errorf("rank %d: Restore = %v, want ErrTooManyLost naming [1 2 3]", r, err)
				}
			}
		})
	}
}

func TestNoCheckpoint(t *testing.T) {
	err := run(t, 4, func(ctx context.Context, comm *goccl.Comm) error {
		s, err := ckpt.New(comm, ckpt.Config{})
		if err != nil {
			return err
		}
		_, err = s.Restore(ctx)
		if !errors.Is(err, ckpt.ErrNoCheckpoint) {
			return fmt.Errorf("rank %d: Restore before Save = %v, want ErrNoCheckpoint", comm.Rank(), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCorruptShard flips bytes in shards held for rank 2, loses rank 2 and
// one of its holders, and checks that a corrupt shard is dropped while k
// intact ones remain, and reported once fewer do.
func TestCorruptShard(t *testing.T) {
	const n, owner = 6, 2
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
	// Shards of rank 2 live on 3, 4, 5, 0, 1 (shard j on (2+1+j) mod 6).
	for _, tc := range []struct {
		name    string
		corrupt []int // holders whose shard of owner is flipped
		lost    []int
		ok      bool
	}{
		{"one corrupt, no loss", []int{4}, nil, true},
		{"one corrupt, owner and a holder lost", []int{5}, []int{owner, 3}, true},
		{"two corrupt, owner lost", []int{0, 1}, []int{owner}, true},
		{"two corrupt, owner and a holder lost", []int{0, 1}, []int{owner, 4}, false},
		{"three corrupt", []int{3, 4, 5}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make([][]byte, n)
			errs := make([]error, n)
			err := run(t, n, func(ctx context.Context, comm *goccl.Comm) error {
				r := comm.Rank()
				s, err := ckpt.New(comm, cfg)
				if err != nil {
					return err
				}
				if err := s.Save(ctx, bytes.Repeat([]byte{byte(r + 1)}, 1000+r)); err != nil {
					return err
				}
				if containsInt(tc.corrupt, r) && !ckpt.CorruptShard(s, owner) {
					return fmt.Errorf("rank %d holds no shard of rank %d", r, owner)
				}
				if containsInt(tc.lost, r) {
					s, _ = ckpt.New(comm, cfg)
				}
				got[r], errs[r] = s.Restore(ctx)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range n {
				if !tc.ok {
					if !errors.Is(errs[r], ckpt.ErrCorrupt) {
						t.Errorf("rank %d: Restore = %v, want ErrCorrupt", r, errs[r])
					}
					continue
				}
				if errs[r] != nil {
					t.Errorf("rank %d: %v", r, errs[r])
				} else if want := bytes.Repeat([]byte{byte(r + 1)}, 1000+r); !bytes.Equal(got[r], want) {
					t.Errorf("rank %d: restored state differs", r)
				}
			}
			if !tc.ok && !strings.Contains(errs[owner].Error(), "checksum mismatch") {
				t.Errorf("owner's error %q does not mention the checksum", errs[owner])
			}
		})
	}
}

// TestRestoreTwice loses different ranks in turn: the redundancy that
// Restore rebuilds must survive a second loss.
func TestRestoreTwice(t *testing.T) {
	const n = 6
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
	var mu sync.Mutex
	var bad []string
	err := run(t, n, func(ctx context.Context, comm *goccl.Comm) error {
		r := comm.Rank()
		s, err := ckpt.New(comm, cfg)
		if err != nil {
			return err
		}
		if err := s.Save(ctx, stateFor(r, 3)); err != nil {
			return err
		}
		for _, lost := range [][]int{{0, 1}, {2, 5}, {1, 2}} {
			if containsInt(lost, r) {
				s, _ = ckpt.New(comm, cfg)
			}
			st, err := s.Restore(ctx)
			if err != nil {
				return err
			}
			if !bytes.Equal(st, stateFor(r, 3)) {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("rank %d after losing %v", r, lost))
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatal(bad)
	}
}

// renumbered is a Comm that claims another rank.
type renumbered struct {
	*goccl.Comm
	rank int
}

func (r renumbered) Rank() int { return r.rank }

// TestRebind saves on one in-process world and restores on a second, as
// after Readmit: survivors Rebind, ranks 1 and 4 start over on the second.
// Rebind refuses a communicator of another size or that renumbers the
// rank, and leaves the checkpoint where it was.
func TestRebind(t *testing.T) {
	const n = 6
	for _, a := range apis {
		t.Run(a.name, func(t *testing.T) {
			old, fresh, small := localComms(t, n), localComms(t, n), localComms(t, n-1)
			ctx := testCtx(t)
			err := eachRank(n, func(r int) error {
				cp, err := a.open(old[r], ckpt.Config{}) // k=3, m=2
				if err != nil {
					return err
				}
				defer func() { cp.close() }()
				if err := cp.Save(ctx, stateFor(r, 1)); err != nil {
					return err
				}
				old[r].Close() // the failed communicator
				if r == 1 || r == 4 {
					cp.close() // the process is gone
					if cp, err = a.open(fresh[r], ckpt.Config{}); err != nil {
						return err
					}
				} else {
					if err := cp.Rebind(small[min(r, n-2)]); !errors.Is(err, ckpt.ErrConfig) {
						return fmt.Errorf("rank %d: Rebind to %d ranks: %v, want ErrConfig", r, n-1, err)
					}
					if err := cp.Rebind(renumbered{fresh[r], (r + 1) % n}); !errors.Is(err, ckpt.ErrConfig) {
						return fmt.Errorf("rank %d: Rebind as rank %d: %v, want ErrConfig", r, (r+1)%n, err)
					}
					if err := cp.Rebind(fresh[r]); err != nil {
						return err
					}
				}
				got, err := cp.Restore(ctx)
				if err != nil {
					return err
				}
				if !bytes.Equal(got, stateFor(r, 1)) {
					return fmt.Errorf("rank %d: restored state differs", r)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			checkNoneKept(t)
		})
	}
}
