package backend

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
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

// TestParseColl: every Coll's name reads back, and algo.Collective's
// names (the same words) with it; anything else is 0.
func TestParseColl(t *testing.T) {
	for c := AllReduce; c <= Barrier; c++ {
		if got := ParseColl(c.String()); got != c {
			t.Errorf("ParseColl(%q) = %v", c.String(), got)
		}
	}
	for _, s := range []string{"", "all_reduce", "Coll(0)"} {
		if got := ParseColl(s); got != 0 {
			t.Errorf("ParseColl(%q) = %v, want 0", s, got)
		}
	}
}

// probeComm is a backend that takes calls of one memory and dtype, and
// records the probe For asked it about.
type probeComm struct {
	Comm
	mem  Memory
	dt   reduceop.DType
	seen *Call
}

func (p *probeComm) Name() string   { return "probe" }
func (p *probeComm) Memory() Memory { return p.mem }
func (p *probeComm) Takes(c *Call) bool {
	p.seen = c
	return c.DType == p.dt && c.Op != reduceop.BXor
}

type probeBuf struct{ device.Buffer }

// TestFor: which library a call runs on, as BackendFor and BackendOn ask.
func TestFor(t *testing.T) {
	dev := probeBuf{}
	host := []byte{1, 2, 3, 4}
	var none *Group
	if got := none.For(Call{Coll: AllReduce, Send: host, Recv: host}); got != "goccl" {
		t.Errorf("no backend: %q", got)
	}
	devOnly := &Group{be: &probeComm{mem: Device, dt: reduceop.Float32}}
	hostOnly := &Group{be: &probeComm{mem: Host, dt: reduceop.Float32}}
	for _, tc := range []struct {
		name string
		g    *Group
		c    Call
		want string
	}{
		{"device call taken", devOnly, Call{Coll: AllReduce, SendDev: dev, RecvDev: dev, DType: reduceop.Float32}, "probe"},
		{"device call of an op it lacks", devOnly, Call{Coll: AllReduce, SendDev: dev, RecvDev: dev, DType: reduceop.Float32, Op: reduceop.BXor}, "goccl"},
		{"device call of a dtype it lacks", devOnly, Call{Coll: AllGather, RecvDev: dev, DType: reduceop.Int16}, "goccl"},
		{"host call, device backend", devOnly, Call{Coll: AllReduce, Send: host, Recv: host, DType: reduceop.Float32}, "goccl"},
		{"no buffer, device backend", devOnly, Call{Coll: AllReduce}, "goccl"},
		{"no buffer, host backend", hostOnly, Call{Coll: Barrier}, "probe"},
		{"host call taken", hostOnly, Call{Coll: AllReduce, Send: host, Recv: host, DType: reduceop.Float32}, "probe"},
		{"host call it leaves", hostOnly, Call{Coll: AllReduce, Send: host, Recv: host, DType: reduceop.Float16}, "goccl"},
		{"device call, host backend (refused)", hostOnly, Call{Coll: AllReduce, SendDev: dev, RecvDev: dev, DType: reduceop.Float32}, "probe"},
	} {
		if got := tc.g.For(tc.c); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A collective of two buffers is asked about with its send buffer
	// apart from the receive one (an all-to-all in place is another call).
	p := devOnly.be.(*probeComm)
	devOnly.For(Call{Coll: AllToAll, SendDev: dev, RecvDev: dev, DType: reduceop.Float32})
	if p.seen.SendDev != nil || p.seen.RecvDev == nil {
		t.Errorf("all-to-all probe: send %v, recv %v; want the receive buffer alone", p.seen.SendDev, p.seen.RecvDev)
	}
	devOnly.For(Call{Coll: Broadcast, SendDev: dev, RecvDev: dev, DType: reduceop.Float32})
	if p.seen.SendDev == nil {
		t.Errorf("broadcast probe lost its buffer")
	}
}
