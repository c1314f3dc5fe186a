package backend

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Kind{"": Auto, "auto": Auto, " MPI ": MPI, "goccl": Goccl, "nccl": NCCL} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Parse("gloo"); err == nil || !strings.Contains(err.Error(), "auto, goccl, nccl or mpi") {
		t.Errorf("Parse(gloo): %v", err)
	}
}

func TestAvailable(t *testing.T) {
	for _, k := range []Kind{Auto, Goccl} {
		if err := Available(k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if _, ok := openers[NCCL]; !ok {
		if err := Available(NCCL); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "goccl built without -tags cuda") {
			t.Errorf("nccl without the tag: %v", err)
		}
	}
	if _, ok := openers[MPI]; !ok {
		if err := Available(MPI); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "goccl built without -tags mpi") {
			t.Errorf("mpi without the tag: %v", err)
		}
	}
}

// TestBlame: the rank behind is the lowest last call below this rank's,
// else the first rank that did not answer, else none.
func TestBlame(t *testing.T) {
	for _, tc := range []struct {
		name string
		me   int
		got  map[int]uint64
		want int
		says string
	}{
		{"one behind", 0, map[int]uint64{1: 5, 2: 4, 3: 5}, 2, "rank 2 is behind: its last call is number 4"},
		{"lowest wins", 1, map[int]uint64{0: 3, 2: 4, 3: 3}, 0, "rank 0 is behind"},
		{"silent", 0, map[int]uint64{1: 5, 3: 5}, 2, "no answer from ranks [2]"},
		{"behind beats silent", 0, map[int]uint64{1: 4}, 1, "rank 1 is behind"},
		{"none", 2, map[int]uint64{0: 5, 1: 5, 3: 6}, -1, "the backend itself is stuck"},
	} {
		peer, why := blame(tc.me, 4, 5, tc.got)
		if peer != tc.want || !strings.Contains(why, tc.says) {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, peer, why, tc.want, tc.says)
		}
	}
}
