package wire_test

import (
	"bytes"
	"testing"

	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

func TestTags(t *testing.T) {
	for _, tc := range []struct {
		tag        transport.Tag
		group, seq uint64
		p2p        bool
	}{
		{wire.CollectiveTag(0, 1), 0, 1, false},
		{wire.CollectiveTag(5, wire.SeqMask), 5, wire.SeqMask, false},
		{wire.CollectiveTag(wire.MaxGroup, 7), wire.MaxGroup, 7, false},
		{wire.P2PTag(3, 1<<31-1), 3, 1<<31 - 1, true},
		{wire.P2PTag(0, 0), 0, 0, true},
	} {
		if g, s, p := wire.Group(tc.tag), wire.Seq(tc.tag), wire.IsP2P(tc.tag); g != tc.group || s != tc.seq || p != tc.p2p {
			t.Errorf("%#x: group %d seq %d p2p %v, want %d %d %v", uint64(tc.tag), g, s, p, tc.group, tc.seq, tc.p2p)
		}
		if wire.IsReserved(tc.tag) {
			t.Errorf("%#x is reserved", uint64(tc.tag))
		}
	}
	for _, r := range []transport.Tag{wire.WaitTag, wire.AbortTag} {
		if !wire.IsReserved(r) || wire.Group(r) <= wire.MaxGroup {
			t.Errorf("%#x: not reserved", uint64(r))
		}
	}
	if wire.WaitTag == wire.AbortTag {
		t.Error("the notice tags are the same")
	}
}

func TestFingerprint(t *testing.T) {
	for _, tc := range []struct {
		call wire.Call
		want string
	}{
		{wire.Call{Op: commslog.AllReduce, DType: reduceop.Float32, Redop: reduceop.Sum, Root: -1, Count: 8, Seq: 3},
			"all_reduce(dtype=float32, count=8, op=sum) #3"},
		{wire.Call{Op: commslog.Broadcast, DType: reduceop.Int64, Root: 2, Count: 0, Seq: 9, Group: 77},
			"broadcast(dtype=int64, count=0, root=2) #9"},
		{wire.Call{Op: commslog.AllToAllSingle, DType: reduceop.Uint8, Root: -1, Count: -1, Seq: 1},
			"all_to_all_single(dtype=uint8) #1"},
		{wire.Call{Op: commslog.AllReduce, DType: reduceop.Float16, Redop: reduceop.Max, ChunkLog: 20, SegLog: 22, Root: -1, Count: 1 << 40, Seq: 1<<39 - 1},
			"all_reduce(dtype=float16, count=1099511627776, op=max, device buffer in 1048576-byte chunks, segments of 4194304 bytes) #549755813887"},
		{wire.Call{Op: commslog.Barrier, Root: -1, Seq: 2}, "barrier() #2"},
	} {
		f := wire.NewFingerprint(tc.call)
		if got := f.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.call, got, tc.want)
		}
		got, ok := f.Parse()
		if !ok || got != tc.call {
			t.Errorf("Parse = %+v, %v, want %+v", got, ok, tc.call)
		}
		var b [wire.FPLen]byte
		wire.Put(b[:], &f)
		if !wire.Equal(b[:], &f) || wire.Fingerprint(b) != f {
			t.Errorf("Put/Equal disagree for %v", f)
		}
		b[31] ^= 1
		if wire.Equal(b[:], &f) {
			t.Errorf("Equal misses a flipped last byte of %v", f)
		}
	}
}

func TestFingerprintKinds(t *testing.T) {
	stray := wire.Probe(wire.KindStray, 4, 12)
	left := wire.Probe(wire.KindLeft, 0, 11)
	call := wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, Group: 4, Seq: 12, Root: -1})
	for _, tc := range []struct {
		f    wire.Fingerprint
		kind byte
		want string
	}{
		{stray, wire.KindStray, "a message for call #12, which this rank had finished without expecting it"},
		{left, wire.KindLeft, "no collective: it closed its communicator after 11 calls"},
		{wire.Fingerprint{}, 0, "a message without a fingerprint"},
		{wire.Fingerprint{'G', 'Q'}, 0, "a message without a fingerprint"},
	} {
		if k := tc.f.Kind(); k != tc.kind {
			t.Errorf("%q: kind %q, want %q", tc.want, k, tc.kind)
		}
		if s := tc.f.String(); s != tc.want {
			t.Errorf("String %q, want %q", s, tc.want)
		}
	}
	if !wire.SameCall(&stray, &call) || wire.SameCall(&left, &call) {
		t.Error("SameCall compares group and seq")
	}
	if _, ok := stray.Parse(); ok {
		t.Error("a stray parses as a call")
	}
}

func TestOpNumbers(t *testing.T) {
	seen := map[uint8]string{}
	for _, op := range commslog.OpNames() {
		n := wire.OpNumber(op)
		if n == 0 || seen[n] != "" {
			t.Fatalf("%s: number %d (taken by %q)", op, n, seen[n])
		}
		seen[n] = op
	}
	if wire.OpNumber("no such op") != 0 {
		t.Error("an unknown op has a number")
	}
}

func TestNotice(t *testing.T) {
	fpA := wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, DType: reduceop.Float32, Count: 8, Root: -1, Seq: 3})
	fpB := wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, DType: reduceop.Int32, Count: 8, Root: -1, Seq: 3})
	for _, n := range []wire.Notice{
		{Culprit: 3, Class: wire.ClassTimeout},
		{Culprit: -1, Class: wire.ClassAborted},
		{Culprit: 2, Class: wire.ClassCancelled},
		{Culprit: 1, Class: wire.ClassLeft, Calls: 1 << 40},
		{Culprit: 5, Class: wire.ClassMismatch, Witness: 7, FPs: [2]wire.Fingerprint{fpA, fpB}},
	} {
		b := n.Bytes()
		if len(b) != wire.NoticeLen {
			t.Fatalf("%v: %d bytes", n, len(b))
		}
		got, err := wire.ParseNotice(b)
		if err != nil || got != n {
			t.Errorf("%v: parsed %v, %v", n, got, err)
		}
	}
	if _, err := wire.ParseNotice(make([]byte, wire.NoticeLen-1)); err == nil {
		t.Error("a short notice parsed")
	}
	// The layout, byte by byte: the culprit, the class, the witness, the calls.
	b := (&wire.Notice{Culprit: 3, Class: wire.ClassMismatch, Witness: 1, FPs: [2]wire.Fingerprint{fpA, fpB}}).Bytes()
	if b[0] != 3 || b[8] != byte(wire.ClassMismatch) || b[12] != 1 || !bytes.Equal(b[16:48], fpA[:]) || !bytes.Equal(b[48:], fpB[:]) {
		t.Errorf("layout: % x", b)
	}
	b = (&wire.Notice{Culprit: 1, Class: wire.ClassLeft, Calls: 9}).Bytes()
	if b[16] != 9 || b[8] != byte(wire.ClassLeft) {
		t.Errorf("leave layout: % x", b)
	}
}

func TestWaitNotice(t *testing.T) {
	for _, on := range []int{0, 5, 1 << 20, -1} {
		var b [wire.WaitNoticeLen]byte
		wire.EncodeWait(b[:], on)
		if got := wire.ParseWait(b[:]); got != on {
			t.Errorf("wait on %d parsed as %d", on, got)
		}
	}
}

func TestP2PHeader(t *testing.T) {
	h := wire.NewP2PHeader(reduceop.Int32, 1000)
	if dt, n, ok := h.Parse(); !ok || dt != reduceop.Int32 || n != 1000 {
		t.Errorf("Parse = %v %d %v", dt, n, ok)
	}
	if s := h.String(); s != "dtype=int32, count=1000" {
		t.Errorf("String %q", s)
	}
	var none wire.P2PHeader
	if _, _, ok := none.Parse(); ok || none.String() != "a message without a point-to-point header" {
		t.Errorf("zero header: %q", none.String())
	}
}

// The decoders take any bytes: a peer's are not to be trusted.
func FuzzNotice(f *testing.F) {
	f.Add((&wire.Notice{Culprit: 5, Class: wire.ClassMismatch, Witness: 7}).Bytes())
	f.Add((&wire.Notice{Culprit: 1, Class: wire.ClassLeft, Calls: 9}).Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := wire.ParseNotice(b)
		if err != nil {
			return
		}
		_ = n.String()
		again, err := wire.ParseNotice(n.Bytes())
		if err != nil || again != n {
			t.Fatalf("%v re-parsed as %v, %v", n, again, err)
		}
		for i := range n.FPs {
			_ = n.FPs[i].String()
			n.FPs[i].Parse()
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add(make([]byte, wire.FPLen))
	fp := wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, DType: reduceop.Float32, Count: 8, Root: -1, Seq: 3})
	f.Add(fp[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var fp wire.Fingerprint
		copy(fp[:], b)
		_ = fp.String()
		if c, ok := fp.Parse(); ok && fp[7] == 0 && (c.Op == fp.Op() && wire.OpNumber(c.Op) != 0) {
			if again := wire.NewFingerprint(c); again != fp {
				t.Fatalf("%v: rebuilt as %v", fp, again)
			}
		}
		var h wire.P2PHeader
		copy(h[:], b)
		_ = h.String()
	})
}

func BenchmarkEqual(b *testing.B) {
	fp := wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, DType: reduceop.Float32, Count: 2, Root: -1, Seq: 3})
	var buf [64]byte
	wire.Put(buf[:], &fp)
	for b.Loop() {
		if !wire.Equal(buf[:], &fp) {
			b.Fatal("differ")
		}
	}
}
