package devpath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// A message of n bytes of device memory goes as chunks of Chunk bytes and
// a last one of the rest, each its own message on the link and its own
// copy through a pinned slot at both ends.
func TestChunkEdges(t *testing.T) {
	for _, n := range []int{0, 1, Chunk - 1, Chunk, Chunk + 1, 2*Chunk - 1, 2 * Chunk, 2*Chunk + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rs := newRanks(t, 2, nil)
			src := rs[0].alloc(t, n, pattern(1))
			dst := rs[1].alloc(t, n, nil)
			noErrors(t, run(t, rs, func(ctx context.Context, k *rank) error {
				if k.r == 0 {
					return k.runOn(ctx, src, n, func(p *Peers, buf []byte) error { return p.Isend(1, buf).Wait(ctx) })
				}
				return k.runOn(ctx, dst, n, func(p *Peers, buf []byte) error { return p.Irecv(0, buf).Wait(ctx) })
			}))
			if !bytes.Equal(dst.Bytes(), src.Bytes()) {
				t.Fatal("received bytes differ from those sent")
			}
			want := chunks(n)
			if got := rs[0].link.sends(); !slices.Equal(got, want) {
				t.Errorf("sent messages of %v bytes, want %v", got, want)
			}
			if got := rs[1].link.recvs(); !slices.Equal(got, want) {
				t.Errorf("received messages of %v bytes, want %v", got, want)
			}
			if n > 0 {
				if got := spans(rs[0].dev, hostsim.KindCopyToHost); !slices.Equal(got, want) {
					t.Errorf("sender copied %v bytes to host, want %v", got, want)
				}
				if got := spans(rs[1].dev, hostsim.KindCopyFromHost); !slices.Equal(got, want) {
					t.Errorf("receiver copied %v bytes from host, want %v", got, want)
				}
			}
		})
	}
}

// A ring allreduce over Peers gives the host result at sizes whose
// messages straddle a chunk's edge, staged and by IPC.
func TestRingAllReduce(t *testing.T) {
	for _, ipc := range []bool{false, true} {
		for _, count := range []int{3 * (Chunk - 1), 3 * Chunk, 3*(Chunk+1) + 2} {
			t.Run(fmt.Sprintf("ipc=%v/%d", ipc, count), func(t *testing.T) {
				const n = 3
				rs := newRanks(t, n, func(k *rank) { k.link.sameHost = ipc })
				bufs := make([]*hostsim.Buffer, n)
				want := make([]byte, count)
				for r, k := range rs {
					bufs[r] = k.alloc(t, count, pattern(r))
					for i, x := range bufs[r].Bytes() {
						want[i] += x
					}
				}
				noErrors(t, run(t, rs, func(ctx context.Context, k *rank) error {
					return k.runOn(ctx, bufs[k.r], count, func(p *Peers, buf []byte) error { return ring.AllReduce(ctx, p, buf) })
				}))
				for r, b := range bufs {
					if !bytes.Equal(b.Bytes(), want) {
						t.Fatalf("rank %d: wrong sum", r)
					}
					// With IPC, the small tails of the segments are still staged.
					acks := rs[r].link.ctlSent + rs[r].link.ctlRecv
					if staged := len(spans(rs[r].dev, hostsim.KindCopyToHost)) > 0; acks > 0 != ipc || !ipc && !staged {
						t.Errorf("rank %d: IPC %v: %d acks, staged %v", r, ipc, acks, staged)
					}
				}
			})
		}
	}
}

// Messages queued on one lane go in the order they were queued, chunk by
// chunk, device memory and host memory alike.
func TestLaneOrder(t *testing.T) {
	sizes := []int{Chunk + 1, 3, 2 * Chunk}
	rs := newRanks(t, 2, nil)
	var src, dst []*hostsim.Buffer
	for i, n := range sizes {
		src = append(src, rs[0].alloc(t, n, pattern(i)))
		dst = append(dst, rs[1].alloc(t, n, nil))
	}
	hostSrc, hostDst := []byte("host!"), make([]byte, 5)
	total := 0
	for _, n := range sizes {
		total += n
	}
	// One stand-in per buffer, from Stand; the first is the Run's.
	stands := func(p *Peers, bufs []*hostsim.Buffer, first []byte) ([][]byte, error) {
		ws := [][]byte{first}
		for _, b := range bufs[1:] {
			w, err := p.Stand(b, 0, len(b.Bytes()))
			if err != nil {
				return nil, err
			}
			ws = append(ws, w)
		}
		return ws, nil
	}
	noErrors(t, run(t, rs, func(ctx context.Context, k *rank) error {
		if k.r == 0 {
			return k.runOn(ctx, src[0], sizes[0], func(p *Peers, first []byte) error {
				ws, err := stands(p, src, first)
				if err != nil {
					return err
				}
				reqs := []algo.Request{p.Isend(1, ws[0]), p.Isend(1, ws[1]), p.Isend(1, hostSrc), p.Isend(1, ws[2])}
				return algo.WaitAll(ctx, reqs...)
			})
		}
		return k.runOn(ctx, dst[0], sizes[0], func(p *Peers, first []byte) error {
			ws, err := stands(p, dst, first)
			if err != nil {
				return err
			}
			reqs := []algo.Request{p.Irecv(0, ws[0]), p.Irecv(0, ws[1]), p.Irecv(0, hostDst), p.Irecv(0, ws[2])}
			return algo.WaitAll(ctx, reqs...)
		})
	}))
	for i := range sizes {
		if !bytes.Equal(dst[i].Bytes(), src[i].Bytes()) {
			t.Errorf("message %d: received bytes differ from those sent", i)
		}
	}
	if !bytes.Equal(hostDst, hostSrc) {
		t.Errorf("host message: got %q, want %q", hostDst, hostSrc)
	}
	want := slices.Concat(chunks(sizes[0]), chunks(sizes[1]), []int{len(hostSrc)}, chunks(sizes[2]))
	if got := rs[0].link.sends(); !slices.Equal(got, want) {
		t.Errorf("sent %v, want %v", got, want)
	}
	if got := rs[1].link.recvs(); !slices.Equal(got, want) {
		t.Errorf("received %v, want %v", got, want)
	}
}

// A lane holds at most laneSlots pinned slots: with the wire stalled, the
// sender copies that many chunks off the device and no more, and the pool
// never grows past that many slots per lane.
func TestLaneSlotBound(t *testing.T) {
	const n = 8 * Chunk
	gate := make(chan struct{})
	rs := newRanks(t, 2, func(k *rank) {
		if k.r == 0 {
			k.link.gate = gate
		}
	})
	src := rs[0].alloc(t, n, pattern(3))
	dst := rs[1].alloc(t, n, nil)
	go func() {
		defer close(gate)
		deadline := time.Now().Add(10 * time.Second)
		for len(spans(rs[0].dev, hostsim.KindCopyToHost)) < laneSlots && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // time for a chunk past the bound to be copied, were it allowed
		if got := len(spans(rs[0].dev, hostsim.KindCopyToHost)); got != laneSlots {
			t.Errorf("with the wire stalled, %d chunks were copied off the device, want %d", got, laneSlots)
		}
	}()
	noErrors(t, run(t, rs, func(ctx context.Context, k *rank) error {
		if k.r == 0 {
			return k.runOn(ctx, src, n, func(p *Peers, buf []byte) error { return p.Isend(1, buf).Wait(ctx) })
		}
		return k.runOn(ctx, dst, n, func(p *Peers, buf []byte) error { return p.Irecv(0, buf).Wait(ctx) })
	}))
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("received bytes differ from those sent")
	}
	for _, k := range rs {
		k.d.mu.Lock()
		slots, free := len(k.d.all), len(k.d.slots)
		k.d.mu.Unlock()
		if slots > laneSlots || free != slots {
			t.Errorf("rank %d: %d pinned slots made, %d back in the pool; want at most %d, all back", k.r, slots, free, laneSlots)
		}
	}
}

// Device IPC between ranks of one host: a message of ipcMin bytes or more
// goes device to device as a header on the wire and an ack back; smaller
// ones, other hosts' and those of a rank with IPC off (GOCCL_DEVICE_IPC=0)
// or a device without it are staged, and the log says why once.
func TestIPC(t *testing.T) {
	hdr := []int{ipcHeaderLen}
	for _, tc := range []struct {
		name     string
		n        int
		sameHost bool
		noIPC    [2]bool // Devices.Get's noIPC (GOCCL_DEVICE_IPC=0) per rank
		noDevIPC bool    // the sender's device refuses IPC
		sent     []int   // the sender's data messages for each of two messages
		acks     int     // acks the receiver sends over both messages
		direct   bool    // device to device
		logs     [2]string
	}{
		{name: "on", n: ipcMin, sameHost: true, sent: slices.Concat(hdr, hdr), acks: 2, direct: true,
			logs: [2]string{"", "goccl device ipc"}},
		{name: "small", n: ipcMin - 1, sameHost: true, sent: []int{ipcMin - 1, ipcMin - 1}},
		{name: "other-host", n: Chunk + 1, sent: slices.Concat(chunks(Chunk+1), chunks(Chunk+1))},
		{name: "receiver-off", n: Chunk + 1, sameHost: true, noIPC: [2]bool{false, true},
			// the first message offers a handle, refused; the second offers none
			sent: slices.Concat(hdr, chunks(Chunk+1), hdr, chunks(Chunk+1)), acks: 1,
			logs: [2]string{"refused by the peer", "goccl device ipc refused, staging"}},
		{name: "sender-off", n: Chunk + 1, sameHost: true, noIPC: [2]bool{true, false},
			sent: slices.Concat(hdr, chunks(Chunk+1), hdr, chunks(Chunk+1))},
		{name: "device-refuses", n: Chunk + 1, sameHost: true, noDevIPC: true,
			sent: slices.Concat(hdr, chunks(Chunk+1), hdr, chunks(Chunk+1)),
			logs: [2]string{"export failed", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newRanks(t, 2, func(k *rank) {
				k.link.sameHost = tc.sameHost
				k.noIPC = tc.noIPC[k.r]
				if k.r == 0 && tc.noDevIPC {
					k.hopts = append(k.hopts, hostsim.NoIPC)
				}
			})
			for i := range 2 {
				src := rs[0].alloc(t, tc.n, pattern(i))
				dst := rs[1].alloc(t, tc.n, nil)
				noErrors(t, run(t, rs, func(ctx context.Context, k *rank) error {
					if k.r == 0 {
						return k.runOn(ctx, src, tc.n, func(p *Peers, buf []byte) error { return p.Isend(1, buf).Wait(ctx) })
					}
					return k.runOn(ctx, dst, tc.n, func(p *Peers, buf []byte) error { return p.Irecv(0, buf).Wait(ctx) })
				}))
				if !bytes.Equal(dst.Bytes(), src.Bytes()) {
					t.Fatalf("message %d: received bytes differ from those sent", i)
				}
			}
			if got := rs[0].link.sends(); !slices.Equal(got, tc.sent) {
				t.Errorf("sender sent %v, want %v", got, tc.sent)
			}
			if got := rs[1].link.recvs(); !slices.Equal(got, tc.sent) {
				t.Errorf("receiver received %v, want %v", got, tc.sent)
			}
			if got := rs[1].link.ctlSent; got != tc.acks {
				t.Errorf("receiver sent %d acks, want %d", got, tc.acks)
			}
			if got := rs[0].link.ctlRecv; got != tc.acks {
				t.Errorf("sender waited for %d acks, want %d", got, tc.acks)
			}
			direct := spans(rs[1].dev, hostsim.KindCopy)
			if tc.direct && !slices.Equal(direct, []int{tc.n, tc.n}) || !tc.direct && len(direct) > 0 {
				t.Errorf("receiver copied %v bytes device to device; want two copies of the message: %v", direct, tc.direct)
			}
			if staged := spans(rs[0].dev, hostsim.KindCopyToHost); tc.direct && len(staged) > 0 {
				t.Errorf("sender staged %v bytes through host memory with IPC", staged)
			}
			for r, want := range tc.logs {
				if want != "" && !rs[r].link.logged(want) {
					t.Errorf("rank %d logged no %q: %q", r, want, rs[r].link.logs)
				}
			}
			// Logged once per peer and kind, however many messages.
			for _, k := range rs {
				if len(k.link.logs) > 1 {
					t.Errorf("rank %d logged %q, want at most one line", k.r, k.link.logs)
				}
			}
		})
	}
}

func TestIPCDisabled(t *testing.T) {
	for v, want := range map[string]bool{"0": true, "off": true, " False ": true, "no": true, "": false, "1": false, "on": false} {
		if got := IPCDisabled(v); got != want {
			t.Errorf("IPCDisabled(%q) = %v, want %v", v, got, want)
		}
	}
}

// A chunk that fails (on the wire, or in its copy onto the device) fails
// its request and the call: nothing after it goes on the wire, Run
// returns the error with a drain, and the drain, once the endpoint is
// closed, ends every lane. The other rank fails with the closed endpoint,
// or, a sender whose every chunk was received before the failure,
// succeeds.
func TestChunkFailure(t *testing.T) {
	const n = 6*Chunk + 5
	for _, where := range []string{"wire", "device"} {
		t.Run(where, func(t *testing.T) {
			var fail sync.Once
			rs := newRanks(t, 2, func(k *rank) {
				switch {
				case where == "wire" && k.r == 0:
					k.link.failSend = 3
				case where == "device" && k.r == 1:
					k.dev = hostsim.New()
					k.ddev = &faultyDev{Device: k.dev, failAt: 3}
				}
			})
			src := rs[0].alloc(t, n, pattern(5))
			dst := rs[1].alloc(t, n, nil)
			var reqErr [2]error
			var peers [2]*Peers
			errs := run(t, rs, func(ctx context.Context, k *rank) error {
				b := []*hostsim.Buffer{src, dst}[k.r]
				drain, err := k.d.Run(ctx, Call{Link: k.link, DType: reduceop.Uint8}, b, n, func(p *Peers, buf []byte) error {
					peers[k.r] = p
					var r algo.Request
					if k.r == 0 {
						r = p.Isend(1, buf)
					} else {
						r = p.Irecv(0, buf)
					}
					reqErr[k.r] = r.Wait(ctx)
					return reqErr[k.r]
				})
				if err == nil {
					return nil // a sender whose chunks were all received before the receiver failed
				}
				if drain == nil {
					return fmt.Errorf("failed (%v) without a drain", err)
				}
				// What the communicators do on a failure: abort, which
				// closes every rank's endpoint, then drain.
				fail.Do(func() {
					for _, k := range rs {
						k.link.ep.Close()
					}
				})
				start := time.Now()
				drain()
				if took := time.Since(start); took > drainMax/2 {
					return fmt.Errorf("drain took %v", took)
				}
				done := make(chan struct{})
				go func() { peers[k.r].wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					return errors.New("lanes still running after the drain")
				}
				return err
			})
			failer := map[string]int{"wire": 0, "device": 1}[where]
			if !errors.Is(errs[failer], errInjected) || !errors.Is(reqErr[failer], errInjected) {
				t.Errorf("rank %d: call failed with %v, its request with %v; want both the injected failure", failer, errs[failer], reqErr[failer])
			}
			other := 1 - failer
			closed := errors.Is(errs[other], transport.ErrClosed) || errors.Is(errs[other], transport.ErrPeerClosed)
			if !closed && (errs[other] != nil || where == "wire") {
				t.Errorf("rank %d: %v, want the closed endpoint's error", other, errs[other])
			}
			if where == "wire" {
				if got := rs[0].link.sends(); len(got) != 3 {
					t.Errorf("sent %v: want nothing after the failed third chunk", got)
				}
			}
		})
	}
}

// Stand-ins and scratch come back to the pools when a call succeeds, and
// are reused by size class and dtype; after a failure they stay out (a
// transport or a copy may still use them).
func TestScratchAndStandInReuse(t *testing.T) {
	rs := newRanks(t, 1, nil)
	k := rs[0]
	ctx := t.Context()
	buf := k.alloc(t, 1000, pattern(0))
	addr := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	scratchMade := func() int {
		k.d.mu.Lock()
		defer k.d.mu.Unlock()
		return len(k.d.allScr)
	}

	var w1 [3]uintptr // the stand-ins of the call: its buffer's and two of scratch
	err := k.runOn(ctx, buf, 1000, func(p *Peers, w []byte) error {
		s := p.GetScratch(1000)
		s1 := addr(s)
		if err := p.Copy(s, w); err != nil {
			return err
		}
		if err := p.Reduce(w, s); err != nil { // w += w
			return err
		}
		p.PutScratch(s)
		s2 := p.GetScratch(900) // same size class
		if addr(s2) != s1 {
			return fmt.Errorf("scratch of the same size class not reused")
		}
		s3 := p.GetScratch(1000)
		if addr(s3) == s1 {
			return fmt.Errorf("scratch in use handed out twice")
		}
		w1 = [3]uintptr{addr(w), addr(s2), addr(s3)}
		if err := p.Reduce(w, make([]byte, len(w))); err == nil || !strings.Contains(err.Error(), "host memory") {
			return fmt.Errorf("reduce with host memory: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range buf.Bytes() {
		if x != 2*pattern(0)(i) {
			t.Fatalf("byte %d: %d, want %d", i, x, 2*pattern(0)(i))
		}
	}
	if got := scratchMade(); got != 2 {
		t.Fatalf("%d scratch buffers made, want 2", got)
	}

	// The next call reuses the stand-in and the scratch left in the pool.
	var w2 [3]uintptr
	if err := k.runOn(ctx, buf, 1000, func(p *Peers, w []byte) error {
		w2 = [3]uintptr{addr(w), addr(p.GetScratch(1000)), addr(p.GetScratch(1000))}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(w1[:])
	slices.Sort(w2[:])
	if w2 != w1 {
		t.Errorf("stand-ins %x, want those of the call before, %x", w2, w1)
	}
	if got := scratchMade(); got != 2 {
		t.Errorf("%d scratch buffers made, want still 2", got)
	}

	// Scratch of another dtype is another buffer.
	fbuf, err := k.dev.Alloc(reduceop.Float32, 250)
	if err != nil {
		t.Fatal(err)
	}
	defer fbuf.Free()
	if err := k.runOn(ctx, fbuf, 1000, func(p *Peers, w []byte) error {
		p.GetScratch(1000)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := scratchMade(); got != 3 {
		t.Errorf("%d scratch buffers made, want 3", got)
	}

	// A failed call keeps its stand-in and scratch out of the pools.
	var w3, s3 uintptr
	err = k.runOn(ctx, buf, 1000, func(p *Peers, w []byte) error {
		w3, s3 = addr(w), addr(p.GetScratch(1000))
		return errInjected
	})
	if !errors.Is(err, errInjected) {
		t.Fatalf("failed call: %v", err)
	}
	if err := k.runOn(ctx, buf, 1000, func(p *Peers, w []byte) error {
		if addr(w) == w3 {
			return errors.New("a failed call's stand-in was reused")
		}
		if addr(p.GetScratch(1000)) == s3 {
			return errors.New("a failed call's scratch was reused")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}
