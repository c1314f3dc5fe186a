package goccl_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// TestFrameFaultsTCP: one rank of a 4-process job over TCP lies on one of
// its links in the middle of a loop of allreduces, then freezes (SIGSTOP),
// so that its other links stay up and the other survivors can learn of the
// fault only from the rank that received the bad bytes:
//
//   - closemid: the connection closes inside a frame header (7 of its 16
//     bytes sent);
//   - truncated: a whole header, then part of the payload it announces,
//     then the connection closes;
//   - garbage: a header announcing more than any message may hold, then
//     noise, on a connection that stays open;
//   - garbage-tag: a frame of the right length whose tag is noise (a tag
//     no receive will ever ask for), on a connection that stays open;
//   - garbage-fp: the right header, then noise of the length it announces
//     in place of the payload, on a connection that stays open.
//
// The lie takes the place of the first frame of the victim's 50th call on
// one link, which is the fingerprint message (see call_fingerprint.go); the
// -payload variants lie in place of the first frame longer than a
// fingerprint, so that a receive of data, not the fingerprint check, meets
// the fault. garbage-tag and garbage-fp lie in place of a frame of exactly
// a fingerprint's 32 bytes, so that they replace the fingerprint.
//
// Every survivor must return, within the timeout + 2 s, an error that names
// the allreduce and the lying rank and wraps:
//
//   - ErrPeerClosed (closemid, truncated): the receiver's link ends inside
//     a frame, the others hear its abort notice;
//   - ErrProtocol (garbage): the receiver refuses the oversized header;
//   - ErrTimeout (garbage-tag): nothing on the wire is wrong as such. The
//     frame is well formed, so the transport queues it as an unexpected
//     message under its tag, where it stays; the fingerprint the receiver
//     waits for never comes, since the victim then stops. The receiver can
//     tell this from a peer that stalled only by guessing, so it times
//     out, and the wait notices name the victim, as in TestStallTCP;
//   - ErrMismatch (garbage-fp): the receiver reads 32 bytes that are not
//     the fingerprint of its call (fpRecv.Wait), and the others hear its
//     abort notice, which carries both fingerprints.
//
// The next call must fail within 100 ms with ErrAborted; after Close no
// goroutine or socket may be left.
//
// Noise in place of a data payload of the right length (after the
// fingerprint) is not detected: frames carry no checksum of their own,
// which is left to TCP's, or to TLS's MAC when Init's TLS option is set.
func TestFrameFaultsTCP(t *testing.T) {
	if os.Getenv(victimChildEnv) != "" {
		victimChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const timeout = 5 * time.Second
	for _, tc := range []struct {
		scenario string
		want     error
	}{
		{"closemid", goccl.ErrPeerClosed},
		{"truncated", goccl.ErrPeerClosed},
		{"garbage", goccl.ErrProtocol},
		{"truncated-payload", goccl.ErrPeerClosed},
		{"garbage-payload", goccl.ErrProtocol},
		{"garbage-tag", goccl.ErrTimeout},
		{"garbage-fp", goccl.ErrMismatch},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			outs := runVictimJob(t, "TestFrameFaultsTCP", tc.scenario, timeout)
			lie := lieLine(outs[victimRank])
			if lie == "" {
				// Print every rank: the victim is killed once the others
				// return, so its own output may say nothing.
				t.Fatalf("the victim never lied; every rank's output:\n%s", strings.Join(outs, "\n---\n"))
			}
			t.Logf("victim: %s", lie)
			for r, o := range outs {
				t.Logf("rank %d: %s", r, summary(o))
			}
			checkSurvivors(t, outs, tc.want, timeout)
			if t.Failed() {
				t.Logf("rank %d (victim) output:\n%s", victimRank, outs[victimRank])
			}
		})
	}
}

// TestStallTCP: one rank of a 4-process job over TCP stops taking part at
// its 50th allreduce, either frozen by SIGSTOP (stop) or sleeping in user
// code while its process, and so its sockets, stay alive (sleep). Every
// survivor must return, within the timeout + 2 s, an error that names the
// allreduce and the stalled rank and wraps ErrTimeout, whichever rank it
// was itself waiting on; then fail fast with ErrAborted and leak nothing.
// The test kills the stalled rank at the end.
func TestStallTCP(t *testing.T) {
	if os.Getenv(victimChildEnv) != "" {
		victimChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const timeout = 5 * time.Second
	for _, scenario := range []string{"stop", "sleep"} {
		t.Run(scenario, func(t *testing.T) {
			outs := runVictimJob(t, "TestStallTCP", scenario, timeout)
			for r, o := range outs {
				t.Logf("rank %d: %s", r, summary(o))
			}
			checkSurvivors(t, outs, goccl.ErrTimeout, timeout)
		})
	}
}

const (
	victimChildEnv = "GOCCL_TEST_VICTIM_CHILD"
	victimRank     = 2
	victimRanks    = 4
	victimCall     = 50 // the call at which the victim misbehaves
)

// classKeys names the FAULT line's field for each error class.
var classKeys = map[error]string{
	goccl.ErrTimeout:    "timeout",
	goccl.ErrPeerClosed: "peerclosed",
	goccl.ErrProtocol:   "protocol",
	goccl.ErrMismatch:   "mismatch",
}

// checkSurvivors checks the FAULT line of every rank but the victim,
// reporting every check that fails rather than the first.
func checkSurvivors(t *testing.T, outs []string, want error, timeout time.Duration) {
	t.Helper()
	for r, out := range outs {
		if r == victimRank {
			continue
		}
		f := parseFault(out)
		if f == nil {
			t.Errorf("rank %d reported no fault:\n%s", r, out)
			continue
		}
		var bad []string
		if f["peer"] != strconv.Itoa(victimRank) {
			bad = append(bad, fmt.Sprintf("names peer %s, want %d", f["peer"], victimRank))
		}
		if f[classKeys[want]] != "true" {
			var is []string
			for _, k := range []string{"timeout", "peerclosed", "protocol", "mismatch"} {
				if f[k] == "true" {
					is = append(is, k)
				}
			}
			bad = append(bad, fmt.Sprintf("error is not %v (it is %v)", want, is))
		}
		if f["op"] != "all_reduce" {
			bad = append(bad, fmt.Sprintf("names op %q, want all_reduce", f["op"]))
		}
		if f["aborted"] != "true" {
			bad = append(bad, "the next call did not fail within 100 ms with ErrAborted")
		}
		if ms := atoi(f["ms"]); ms > (timeout + 2*time.Second).Milliseconds() {
			bad = append(bad, fmt.Sprintf("took %d ms, more than the timeout %v + 2 s", ms, timeout))
		}
		if atoi(f["goroutines"]) > 0 || atoi(f["fds"]) > 0 {
			bad = append(bad, fmt.Sprintf("leaked %s goroutines and %s file descriptors after Close", f["goroutines"], f["fds"]))
		}
		if len(bad) > 0 {
			t.Errorf("rank %d: %s\n%s", r, strings.Join(bad, "; "), out)
		}
	}
}

// lieLine returns the victim's "LIE ..." line, or "".
func lieLine(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "LIE ") {
			return line
		}
	}
	return ""
}

// summary returns a child's "FAULT ..." and "error: ..." lines.
func summary(out string) string {
	var s []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "FAULT ") || strings.HasPrefix(line, "error: ") {
			s = append(s, line)
		}
	}
	return strings.Join(s, "\n")
}

// runVictimJob starts victimRanks ranks of this test binary, running test
// in the child role with scenario, and returns their outputs. Once every
// survivor has exited it kills the victim (stopped or sleeping), and waits
// for it, so no process outlives the test.
func runVictimJob(t *testing.T, test, scenario string, timeout time.Duration) []string {
	t.Helper()
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	vctx, kill := context.WithCancel(ctx)
	defer kill()
	outs := make([]string, victimRanks)
	var survivors, all sync.WaitGroup
	for r := range victimRanks {
		cctx := ctx
		if r == victimRank {
			cctx = vctx
		}
		cmd := exec.CommandContext(cctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
		cmd.Env = cleanEnv(victimChildEnv+"=1", "GOCCL_TEST_VICTIM_SCENARIO="+scenario,
			"GOCCL_TEST_VICTIM_TIMEOUT="+timeout.String(), "GOCCL_TRANSPORT=tcp",
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(victimRanks),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.WaitDelay = 5 * time.Second
		wg := &survivors
		if r == victimRank {
			wg = &all
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, _ := cmd.CombinedOutput()
			outs[r] = string(out)
		}()
	}
	survivors.Wait()
	hung := ctx.Err() != nil
	kill() // SIGKILL works on a stopped process too
	all.Wait()
	if hung {
		t.Fatalf("the survivors did not end within 40 s (a hang):\n%s", strings.Join(outs, "\n---\n"))
	}
	return outs
}

// victimChild is one rank: it loops over an allreduce until a call fails
// (the victim misbehaving at its call victimCall), then reports as
// faultChild does, with the error's class.
func victimChild(t *testing.T) {
	scenario := os.Getenv("GOCCL_TEST_VICTIM_SCENARIO")
	timeout, err := time.ParseDuration(os.Getenv("GOCCL_TEST_VICTIM_TIMEOUT"))
	if err != nil {
		t.Fatal(err)
	}
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	victim := rank == victimRank
	var arm, used atomic.Bool
	if victim && scenario != "stop" && scenario != "sleep" && scenario != "linkdown" {
		goccl.SetTestWrapConn(func(peer int, c net.Conn) net.Conn {
			return &liarConn{Conn: c, peer: peer, mode: scenario, arm: &arm, used: &used}
		})
		defer goccl.SetTestWrapConn(nil)
	}
	ctx := context.Background()
	// Start the runtime's network poller (its descriptors stay for the
	// process's life) before counting what Init opens.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	fds0, g0 := openFDs(), runtime.NumGoroutine()
	c, err := goccl.Init(ctx, goccl.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float32, 4096*c.Size())
	run := func() error { return c.AllReduce(ctx, buf, reduceop.Sum) }
	for i := range 1000 {
		if victim && i == victimCall {
			switch scenario {
			case "stop":
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				// The stop takes a moment to reach every thread: do not
				// start the call meanwhile.
				time.Sleep(time.Hour)
			case "sleep":
				time.Sleep(time.Hour)
			case "linkdown": // TestNetnsLinkDown: this rank is alone in its network namespace
				if out, err := exec.Command("ip", "link", "set", "eth0", "down").CombinedOutput(); err != nil {
					t.Fatalf("ip link set eth0 down: %v: %s", err, out)
				}
			default:
				arm.Store(true) // the next frame the victim sends is a lie
			}
		}
		start := time.Now()
		err := run()
		if err == nil {
			continue
		}
		ms := time.Since(start).Milliseconds()
		var ge *goccl.Error
		peer, opName := -1, ""
		if errors.As(err, &ge) {
			peer, opName = ge.Peer, ge.Op
		}
		t1 := time.Now()
		err2 := run()
		fast := errors.Is(err2, goccl.ErrAborted) && time.Since(t1) < 100*time.Millisecond
		c.Close()
		g, stacks := goroutinesLeft(g0) // faults_test.go
		fmt.Printf("FAULT op=%s peer=%d timeout=%v peerclosed=%v protocol=%v mismatch=%v aborted=%v ms=%d goroutines=%d fds=%d\nerror: %v\nnext: %v\n%s",
			opName, peer, errors.Is(err, goccl.ErrTimeout), errors.Is(err, goccl.ErrPeerClosed), errors.Is(err, goccl.ErrProtocol),
			errors.Is(err, goccl.ErrMismatch), fast, ms, g, openFDs()-fds0, err, err2, stacks)
		return
	}
	c.Close()
	t.Fatalf("rank %d: no fault in 1000 calls", rank)
}

// liarConn passes frames through until arm is set; then the first frame
// header written on any of the victim's connections (used picks one) is
// replaced by the lie of mode, and the process stops itself with SIGSTOP,
// keeping its other connections open and silent. It follows the frame
// boundaries of what it writes (16-byte header: tag, length, both uint64
// little-endian, then the payload) and lies on a frame whose header starts
// a Write, as the transport writes a wrapped connection one header or
// payload at a time.
type liarConn struct {
	net.Conn
	peer      int
	mode      string // closemid, truncated or garbage, maybe with -payload; garbage-tag or garbage-fp
	arm, used *atomic.Bool

	mu   sync.Mutex
	hdr  [16]byte
	nhdr int    // bytes of the current header written so far
	left uint64 // payload bytes of the current frame still to write
}

// Read passes data through until the lie has been told on any of the
// victim's connections; then it never returns, so that the victim does not
// react (abort, and send notices blaming the rank it lied to) to what the
// lie brings back in the moment before it stops.
func (l *liarConn) Read(b []byte) (int, error) {
	n, err := l.Conn.Read(b)
	if l.used.Load() {
		select {}
	}
	return n, err
}

func (l *liarConn) Write(b []byte) (int, error) {
	if l.used.Load() {
		select {} // the lie is told: the victim says nothing more
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nhdr == 0 && l.left == 0 && len(b) >= len(l.hdr) && l.arm.Load() {
		n := binary.LittleEndian.Uint64(b[8:16])
		if l.fits(n) && l.used.CompareAndSwap(false, true) {
			l.lie(b[:16]) // never returns
		}
	}
	l.track(b)
	return l.Conn.Write(b)
}

// fits reports whether the lie may replace a frame of n bytes.
func (l *liarConn) fits(n uint64) bool {
	switch {
	case strings.HasSuffix(l.mode, "-payload"):
		return n > fpLen // longer than a fingerprint message
	case l.mode == "truncated":
		return n >= 2 // a payload to cut
	case l.mode == "garbage-tag", l.mode == "garbage-fp":
		return n == fpLen // the fingerprint message
	}
	return true
}

// fpLen is the length of a fingerprint message (call_fingerprint.go).
const fpLen = 32

// track advances over b in the stream of frames.
func (l *liarConn) track(b []byte) {
	for len(b) > 0 {
		if l.left > 0 {
			k := min(uint64(len(b)), l.left)
			l.left -= k
			b = b[k:]
			continue
		}
		k := copy(l.hdr[l.nhdr:], b)
		l.nhdr += k
		b = b[k:]
		if l.nhdr == len(l.hdr) {
			l.nhdr, l.left = 0, binary.LittleEndian.Uint64(l.hdr[8:])
		}
	}
}

// lie sends the lie in place of the frame whose header is hdr, then stops
// the process; it does not return. Closing means closing our write side
// (a FIN, as when the socket is closed), so that the victim's own reader
// does not see the close and abort before the stop, which would send
// notices that muddle what the survivors have to find out for themselves.
func (l *liarConn) lie(hdr []byte) {
	n := binary.LittleEndian.Uint64(hdr[8:])
	closeWrite := func() {
		if cw, ok := l.Conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			l.Conn.Close()
		}
	}
	switch strings.TrimSuffix(l.mode, "-payload") {
	case "closemid":
		l.Conn.Write(hdr[:7])
		closeWrite()
	case "truncated":
		l.Conn.Write(hdr)
		l.Conn.Write(make([]byte, min(n/2, 4096)))
		closeWrite()
	case "garbage":
		rng := rand.New(rand.NewPCG(7, uint64(l.peer)))
		g := make([]byte, 16+64)
		for i := range g {
			g[i] = byte(rng.Uint32())
		}
		// Over any MaxMessage: the receiver must not try to read it.
		binary.LittleEndian.PutUint64(g[8:], 1<<63|binary.LittleEndian.Uint64(g[8:]))
		l.Conn.Write(g)
	case "garbage-tag":
		rng := rand.New(rand.NewPCG(8, uint64(l.peer)))
		// A group id (the tag's top 24 bits, comm.go) that is neither the
		// world's (0) nor the reserved one of the notices (all ones).
		tag := rng.Uint64()&^(1<<63) | 1<<62
		g := make([]byte, 16+n)
		binary.LittleEndian.PutUint64(g, tag)
		binary.LittleEndian.PutUint64(g[8:], n)
		for i := 16; i < len(g); i++ {
			g[i] = byte(rng.Uint32())
		}
		l.Conn.Write(g)
	case "garbage-fp":
		rng := rand.New(rand.NewPCG(9, uint64(l.peer)))
		g := append([]byte(nil), hdr...)
		for range n {
			g = append(g, byte(rng.Uint32()))
		}
		l.Conn.Write(g)
	}
	fmt.Printf("LIE peer=%d mode=%s in place of tag=%#x len=%d\n", l.peer, l.mode, binary.LittleEndian.Uint64(hdr), n)
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	// The stop reaches this thread a moment later: until then, say nothing
	// (a failed write would make the victim abort and blame the rank it
	// lied to).
	select {}
}
