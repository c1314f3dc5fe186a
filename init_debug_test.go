package goccl

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestDebugLogOff(t *testing.T) {
	o, err := buildOptions([]Option{fakeEnv(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if o.debugLogger(0) != nil {
		t.Error("a debug logger without GOCCL_DEBUG")
	}
	debugLog(nil, 0, "nothing") // must not panic
}

func TestDebugLogInit(t *testing.T) {
	for _, level := range []string{"INFO", "debug"} {
		var buf bytes.Buffer
		c, err := Init(t.Context(), WithEnv(Env{Rank: 0, Size: 1, LocalRank: -1, LocalSize: -1, Source: "options"}),
			fakeEnv(map[string]string{EnvDebug: level, "GOCCL_TRANSPORT": "mem"}), withDebugOutput(&buf))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 3 {
			t.Fatalf("GOCCL_DEBUG=%s: %d lines:\n%s", level, len(lines), out)
		}
		if got := strings.Contains(out, "goccl details"); got != (level == "debug") {
			t.Errorf("GOCCL_DEBUG=%s: details logged: %v", level, got)
		}
		for _, l := range lines {
			if !strings.Contains(l, " rank=0") {
				t.Errorf("GOCCL_DEBUG=%s: line without the rank: %s", level, l)
			}
		}
		for _, want := range []string{"launcher=options", "size=1", "transport=mem", "algorithms=\"cost model\"", "timeout=30m0s", "stall_grace=1s"} {
			if !strings.Contains(out, want) {
				t.Errorf("GOCCL_DEBUG=%s: no %s in\n%s", level, want, out)
			}
		}
	}
}

// TestDebugLogTCP runs a two-rank Init over TCP loopback with
// GOCCL_DEBUG=info and checks each rank's lines carry its rank and name
// its peer. GOCCL_TRANSPORT=tcp keeps the pair on TCP: left on auto, two
// ranks on one host take shm.
func TestDebugLogTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	const size = 2
	var bufs [size]bytes.Buffer
	comms := make([]*Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			comms[r], errs[r] = Init(t.Context(), fakeEnv(map[string]string{EnvDebug: "info", "GOCCL_TRANSPORT": "tcp"}), withDebugOutput(&bufs[r]),
				WithEnv(Env{Rank: r, Size: size, LocalRank: r, LocalSize: size, MasterAddr: "127.0.0.1", MasterPort: port, Source: "options"}))
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
	for r := range size {
		out := bufs[r].String()
		t.Logf("rank %d:\n%s", r, out)
		for _, want := range []string{
			"master=127.0.0.1:" + strconv.Itoa(port), "transport=tcp", "store=127.0.0.1:",
			"host_store=" + strconv.FormatBool(r == 0), "peer=" + strconv.Itoa(1-r),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("rank %d: no %s in\n%s", r, want, out)
			}
		}
		for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			if !strings.Contains(l+" ", " rank="+strconv.Itoa(r)+" ") {
				t.Errorf("rank %d: line without its rank: %s", r, l)
			}
		}
	}
}
