package ibfake_test

import (
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

type end struct {
	dev ib.Device
	cq  ib.CQ
	qp  ib.QP
}

func open(t *testing.T, f *ibfake.Fabric, name string) *end {
	t.Helper()
	d, err := f.Provider().Open(name, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := d.CreateQP(cq, ib.QPCaps{SendDepth: 16, RecvDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	return &end{d, cq, qp}
}

// pair connects two queue pairs; post-before-RTS must fail on the way.
func pair(t *testing.T, f *ibfake.Fabric) (*end, *end) {
	t.Helper()
	a, b := open(t, f, "a"), open(t, f, "b")
	if err := a.qp.PostSend(&ib.SendWR{Op: ib.OpWrite}); err == nil {
		t.Fatal("post send in RESET succeeded")
	}
	for _, x := range []*end{a, b} {
		if err := x.qp.Init(1, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.qp.ReadyToSend(ib.RTSAttr{}); err == nil {
		t.Fatal("INIT -> RTS succeeded")
	}
	for _, c := range [][2]*end{{a, b}, {b, a}} {
		pi := c[1].dev.Port()
		if err := c[0].qp.ReadyToReceive(ib.RTRAttr{Port: 1, RemoteLID: pi.LID, RemoteQPN: c[1].qp.Num(), MTU: pi.MTU}); err != nil {
			t.Fatal(err)
		}
		if err := c[0].qp.ReadyToSend(ib.RTSAttr{Timeout: 14, RetryCnt: 7, RNRRetry: 7}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func poll(t *testing.T, cq ib.CQ) ib.WC {
	t.Helper()
	var wc [1]ib.WC
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return ib.WC{}
}

func TestSendWriteRead(t *testing.T) {
	a, b := pair(t, ibfake.New())
	src, dst := []byte("hello world"), make([]byte, 64)
	ms, _ := a.dev.RegMR(src, ib.AccessLocalWrite)
	md, _ := b.dev.RegMR(dst, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)

	// SEND into a posted receive.
	if err := b.qp.PostRecv(&ib.RecvWR{ID: 9, Addr: ib.AddrOf(dst), Len: 64, LKey: md.LKey()}); err != nil {
		t.Fatal(err)
	}
	a.qp.PostSend(&ib.SendWR{ID: 1, Op: ib.OpSend, Addr: ib.AddrOf(src), Len: 5, LKey: ms.LKey(), Signaled: true})
	if wc := poll(t, a.cq); wc.ID != 1 || wc.Status != ib.StatusSuccess || wc.Op != ib.WCSend {
		t.Fatalf("sender: %+v", wc)
	}
	if wc := poll(t, b.cq); wc.ID != 9 || wc.Op != ib.WCRecv || wc.Len != 5 || string(dst[:5]) != "hello" {
		t.Fatalf("receiver: %+v %q", wc, dst[:5])
	}
	// WRITE with immediate at an offset.
	b.qp.PostRecv(&ib.RecvWR{ID: 10, Addr: ib.AddrOf(dst), Len: 64, LKey: md.LKey()})
	a.qp.PostSend(&ib.SendWR{ID: 2, Op: ib.OpWriteImm, Addr: ib.AddrOf(src[6:]), Len: 5, LKey: ms.LKey(),
		RemoteAddr: ib.AddrOf(dst[20:]), RKey: md.RKey(), Imm: 77, Signaled: true})
	poll(t, a.cq)
	if wc := poll(t, b.cq); wc.Op != ib.WCRecvImm || wc.Imm != 77 || string(dst[20:25]) != "world" {
		t.Fatalf("write with immediate: %+v %q", wc, dst[20:25])
	}
	// READ back.
	back := make([]byte, 5)
	mb, _ := a.dev.RegMR(back, ib.AccessLocalWrite)
	a.qp.PostSend(&ib.SendWR{ID: 3, Op: ib.OpRead, Addr: ib.AddrOf(back), Len: 5, LKey: mb.LKey(),
		RemoteAddr: ib.AddrOf(dst[20:]), RKey: md.RKey(), Signaled: true})
	if wc := poll(t, a.cq); wc.Status != ib.StatusSuccess || string(back) != "world" {
		t.Fatalf("read: %+v %q", wc, back)
	}
}

func TestRemoteAccessError(t *testing.T) {
	a, b := pair(t, ibfake.New())
	src, dst := make([]byte, 16), make([]byte, 16)
	ms, _ := a.dev.RegMR(src, ib.AccessLocalWrite)
	md, _ := b.dev.RegMR(dst, ib.AccessLocalWrite) // no remote write
	a.qp.PostSend(&ib.SendWR{ID: 1, Op: ib.OpWrite, Addr: ib.AddrOf(src), Len: 16, LKey: ms.LKey(),
		RemoteAddr: ib.AddrOf(dst), RKey: md.RKey()})
	if wc := poll(t, a.cq); wc.Status != ib.StatusRemAccessErr {
		t.Fatalf("write without remote access: %+v", wc)
	}
	// The queue pair is in error now: later requests flush.
	a.qp.PostSend(&ib.SendWR{ID: 2, Op: ib.OpWrite})
	if wc := poll(t, a.cq); wc.ID != 2 || wc.Status != ib.StatusFlushed {
		t.Fatalf("after the error: %+v", wc)
	}
}

func TestBreakAndCrash(t *testing.T) {
	f := ibfake.New()
	a, b := pair(t, f)
	buf := make([]byte, 8)
	mb, _ := b.dev.RegMR(buf, ib.AccessLocalWrite)
	b.qp.PostRecv(&ib.RecvWR{ID: 5, Addr: ib.AddrOf(buf), Len: 8, LKey: mb.LKey()})
	f.Device("b").QPTo("a").Break()
	if wc := poll(t, b.cq); wc.ID != 5 || wc.Status != ib.StatusFlushed {
		t.Fatalf("posted receive after Break: %+v", wc)
	}
	a.qp.PostSend(&ib.SendWR{ID: 6, Op: ib.OpWrite, Signaled: true})
	if wc := poll(t, a.cq); wc.Status != ib.StatusRetryExceeded {
		t.Fatalf("write towards a broken queue pair: %+v", wc)
	}

	// A device's Break fails its queue pairs as QP.Break does.
	e, g := pair(t, ibfake.New())
	mg, _ := g.dev.RegMR(buf, ib.AccessLocalWrite)
	g.qp.PostRecv(&ib.RecvWR{ID: 9, Addr: ib.AddrOf(buf), Len: 8, LKey: mg.LKey()})
	g.dev.(*ibfake.Device).Break()
	if wc := poll(t, g.cq); wc.ID != 9 || wc.Status != ib.StatusFlushed {
		t.Fatalf("posted receive after the device's Break: %+v", wc)
	}
	e.qp.PostSend(&ib.SendWR{ID: 10, Op: ib.OpWrite, Signaled: true})
	if wc := poll(t, e.cq); wc.Status != ib.StatusRetryExceeded {
		t.Fatalf("write towards a broken device: %+v", wc)
	}

	c, d := pair(t, ibfake.New())
	c.qp.PostSend(&ib.SendWR{ID: 7, Op: ib.OpWrite, Signaled: true})
	if wc := poll(t, c.cq); wc.Status != ib.StatusSuccess {
		t.Fatalf("heartbeat: %+v", wc)
	}
	d.dev.(*ibfake.Device).Crash()
	c.qp.PostSend(&ib.SendWR{ID: 8, Op: ib.OpWrite, Signaled: true})
	if wc := poll(t, c.cq); wc.Status != ib.StatusRetryExceeded {
		t.Fatalf("write towards a crashed device: %+v", wc)
	}
	if _, err := d.cq.Poll(make([]ib.WC, 1)); err == nil {
		t.Fatal("poll on a crashed device succeeded")
	}
}

// TestSlowCQ: a delayed completion is invisible until its time, and an
// armed queue's Wait wakes when it becomes visible.
func TestSlowCQ(t *testing.T) {
	f := ibfake.New()
	a, _ := pair(t, f)
	const delay = 20 * time.Millisecond
	f.SetCQDelay(delay)
	start := time.Now()
	a.qp.PostSend(&ib.SendWR{ID: 1, Op: ib.OpWrite, Signaled: true})
	if n, _ := a.cq.Poll(make([]ib.WC, 1)); n != 0 {
		if time.Since(start) < delay {
			t.Fatal("a delayed completion was visible at once")
		}
		t.Skip("the machine was too slow to see the completion invisible")
	}
	if err := a.cq.Arm(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.cq.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if time.Since(start) < delay {
		t.Fatalf("woken after %v, before the completion was visible (%v)", time.Since(start), delay)
	}
	if wc := poll(t, a.cq); wc.ID != 1 {
		t.Fatalf("%+v", wc)
	}
}
