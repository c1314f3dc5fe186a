package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// backend makes n handles on one fresh store.
type backend struct {
	name string
	make func(t *testing.T, n int) []Store
}

func tcpHandles(t *testing.T, n int, sopts, copts Options) []Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(sopts)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	hs := make([]Store, n)
	for i := range hs {
		c, err := Dial(context.Background(), ln.Addr().String(), copts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hs[i] = c
	}
	return hs
}

func fileHandles(t *testing.T, n int) []Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "store")
	hs := make([]Store, n)
	for i := range hs {
		f, err := NewFileStore(path, Options{PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		hs[i] = f
	}
	return hs
}

var backends = []backend{
	{"tcp", func(t *testing.T, n int) []Store { return tcpHandles(t, n, Options{}, Options{}) }},
	{"tcp-secret", func(t *testing.T, n int) []Store {
		o := Options{Secret: []byte("s3cret")}
		return tcpHandles(t, n, o, o)
	}},
	{"file", fileHandles},
	{"tcp-prefix", func(t *testing.T, n int) []Store {
		hs := tcpHandles(t, n, Options{}, Options{})
		for i := range hs {
			hs[i] = WithPrefix(hs[i], "job7")
		}
		return hs
	}},
	{"file-prefix", func(t *testing.T, n int) []Store {
		hs := fileHandles(t, n)
		for i := range hs {
			hs[i] = WithPrefix(hs[i], "job7")
		}
		return hs
	}},
}

func TestStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Run("SetGet", func(t *testing.T) { testSetGet(t, b.make(t, 2)) })
			t.Run("Add", func(t *testing.T) { testAdd(t, b.make(t, 1)[0]) })
			t.Run("ConcurrentAdd", func(t *testing.T) { testConcurrentAdd(t, b.make(t, 8)) })
			t.Run("CompareSet", func(t *testing.T) { testCompareSet(t, b.make(t, 1)[0]) })
			t.Run("DeleteNumKeys", func(t *testing.T) { testDeleteNumKeys(t, b.make(t, 1)[0]) })
			t.Run("GetWaits", func(t *testing.T) { testGetWaits(t, b.make(t, 2)) })
			t.Run("Wait", func(t *testing.T) { testWait(t, b.make(t, 3)) })
			t.Run("Timeout", func(t *testing.T) { testTimeout(t, b.make(t, 1)[0]) })
		})
	}
}

func testSetGet(t *testing.T, h []Store) {
	ctx := context.Background()
	cases := []struct {
		key   string
		value []byte
	}{
		{"a", []byte("1")},
		{"empty", []byte{}},
		{"binary", []byte{0, 1, 2, 255, 0}},
		{"", []byte("empty key")},
		{"big", bytes.Repeat([]byte{7}, 1<<20+3)},
		{"a", []byte("overwritten")},
	}
	for _, c := range cases {
		if err := h[0].Set(ctx, c.key, c.value); err != nil {
			t.Fatalf("Set(%q): %v", c.key, err)
		}
		for i, s := range h {
			got, err := s.Get(ctx, c.key)
			if err != nil {
				t.Fatalf("handle %d Get(%q): %v", i, c.key, err)
			}
			if !bytes.Equal(got, c.value) {
				t.Fatalf("handle %d Get(%q) = %d bytes, want %d", i, c.key, len(got), len(c.value))
			}
		}
	}
}

func testAdd(t *testing.T, s Store) {
	ctx := context.Background()
	steps := []struct {
		delta, want int64
	}{{1, 1}, {0, 1}, {41, 42}, {-50, -8}, {8, 0}}
	for _, st := range steps {
		got, err := s.Add(ctx, "n", st.delta)
		if err != nil || got != st.want {
			t.Fatalf("Add(%d) = %d, %v; want %d", st.delta, got, err, st.want)
		}
	}
	if _, err := s.Add(ctx, "n", 3); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "n"); err != nil || string(v) != "3" {
		t.Fatalf("Get(counter) = %q, %v; want \"3\"", v, err)
	}
	if err := s.Set(ctx, "text", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, "text", 1); !errors.Is(err, ErrNotInteger) {
		t.Fatalf("Add on text: err = %v, want ErrNotInteger", err)
	}
}

func testConcurrentAdd(t *testing.T, h []Store) {
	const perHandle = 40
	ctx := context.Background()
	var mu sync.Mutex
	var seen []int64
	var wg sync.WaitGroup
	for _, s := range h {
		for range 2 { // two goroutines per handle
			wg.Go(func() {
				for range perHandle {
					v, err := s.Add(ctx, "count", 1)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					seen = append(seen, v)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	total := int64(len(h) * 2 * perHandle)
	slices.Sort(seen)
	for i, v := range seen {
		if v != int64(i+1) {
			t.Fatalf("Add results sorted[%d] = %d, want %d (lost or duplicated update)", i, v, i+1)
		}
	}
	if got, err := h[0].Add(ctx, "count", 0); err != nil || got != total {
		t.Fatalf("final count = %d, %v; want %d", got, err, total)
	}
}

func testCompareSet(t *testing.T, s Store) {
	ctx := context.Background()
	steps := []struct {
		expected, desired, want string
		wantNil                 bool
	}{
		{expected: "x", desired: "y", wantNil: true}, // missing key, expected not empty: nothing stored
		{expected: "", desired: "first", want: "first"},
		{expected: "", desired: "second", want: "first"}, // present: empty expected does not match
		{expected: "wrong", desired: "z", want: "first"},
		{expected: "first", desired: "", want: ""},
		{expected: "", desired: "third", want: "third"}, // empty value matches empty expected
	}
	for i, st := range steps {
		got, err := s.CompareSet(ctx, "k", []byte(st.expected), []byte(st.desired))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if st.wantNil != (got == nil) || string(got) != st.want {
			t.Fatalf("step %d: CompareSet(%q, %q) = %q (nil %v), want %q (nil %v)",
				i, st.expected, st.desired, got, got == nil, st.want, st.wantNil)
		}
	}
}

func testDeleteNumKeys(t *testing.T, s Store) {
	ctx := context.Background()
	n0, err := s.NumKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Set(ctx, fmt.Sprint("k", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.NumKeys(ctx); err != nil || n != n0+5 {
		t.Fatalf("NumKeys = %d, %v; want %d", n, err, n0+5)
	}
	if ok, err := s.Delete(ctx, "k3"); err != nil || !ok {
		t.Fatalf("Delete(k3) = %v, %v; want true", ok, err)
	}
	if ok, err := s.Delete(ctx, "k3"); err != nil || ok {
		t.Fatalf("second Delete(k3) = %v, %v; want false", ok, err)
	}
	if n, err := s.NumKeys(ctx); err != nil || n != n0+4 {
		t.Fatalf("NumKeys = %d, %v; want %d", n, err, n0+4)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Get(short, "k3"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a deleted key: err = %v, want DeadlineExceeded", err)
	}
}

func testGetWaits(t *testing.T, h []Store) {
	ctx := context.Background()
	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		v, err := h[0].Get(ctx, "late")
		errc <- err
		got <- v
	}()
	// While h[0] waits, the same handle and another one still work.
	if err := h[0].Set(ctx, "other", []byte("o")); err != nil {
		t.Fatal(err)
	}
	if v, err := h[1].Get(ctx, "other"); err != nil || string(v) != "o" {
		t.Fatalf("Get(other) = %q, %v", v, err)
	}
	if err := h[1].Set(ctx, "late", []byte("here")); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != "here" {
		t.Fatalf("Get(late) = %q, want \"here\"", v)
	}
}

func testWait(t *testing.T, h []Store) {
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- h[0].Wait(ctx, "a", "b", "c") }()
	for i, k := range []string{"c", "a", "b"} {
		if err := h[1+i%2].Set(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := h[0].Wait(ctx); err != nil {
		t.Fatalf("Wait with no keys: %v", err)
	}
}

func testTimeout(t *testing.T, s Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := s.Get(ctx, "never")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get: err = %v, want DeadlineExceeded", err)
	}
	var oe *OpError
	if !errors.As(err, &oe) || oe.Op != "get" {
		t.Fatalf("Get: err = %#v, want *OpError for get", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if err := s.Wait(ctx2, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: err = %v, want DeadlineExceeded", err)
	}
	// The store still works after a cancelled wait.
	bg := context.Background()
	if err := s.Set(bg, "never", []byte("now")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(bg, "never"); err != nil || string(v) != "now" {
		t.Fatalf("Get after timeout = %q, %v", v, err)
	}
	cancelled, c := context.WithCancel(bg)
	c()
	if err := s.Set(cancelled, "x", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Set with a cancelled ctx: err = %v, want Canceled", err)
	}
}

func TestDefaultTimeout(t *testing.T) {
	h := tcpHandles(t, 1, Options{}, Options{Timeout: 20 * time.Millisecond})
	if _, err := h[0].Get(context.Background(), "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("tcp Get: err = %v, want DeadlineExceeded", err)
	}
	f, err := NewFileStore(filepath.Join(t.TempDir(), "s"), Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Get(context.Background(), "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("file Get: err = %v, want DeadlineExceeded", err)
	}
}

func TestPrefixIsolation(t *testing.T) {
	for _, b := range backends[:3] {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			base := b.make(t, 1)[0]
			j1, j2 := WithPrefix(base, "job1"), WithPrefix(base, "job2")
			if err := j1.Set(ctx, "k", []byte("one")); err != nil {
				t.Fatal(err)
			}
			if err := j2.Set(ctx, "k", []byte("two")); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				s    Store
				key  string
				want string
			}{{j1, "k", "one"}, {j2, "k", "two"}, {base, "job1/k", "one"}, {base, "job2/k", "two"}} {
				if v, err := c.s.Get(ctx, c.key); err != nil || string(v) != c.want {
					t.Fatalf("Get(%q) = %q, %v; want %q", c.key, v, err, c.want)
				}
			}
			if _, err := j1.Add(ctx, "n", 5); err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if _, err := j2.Get(short, "n"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("job2 sees job1's key: err = %v", err)
			}
			if err := j1.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := j2.Get(ctx, "k"); err != nil {
				t.Fatalf("closing a prefixed view closed the store: %v", err)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	for _, b := range backends[:3] {
		t.Run(b.name, func(t *testing.T) {
			s := b.make(t, 1)[0]
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := s.Set(context.Background(), "k", nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("Set after Close: err = %v, want ErrClosed", err)
			}
		})
	}
}

func TestCloseUnblocksGet(t *testing.T) {
	h := tcpHandles(t, 1, Options{}, Options{})
	errc := make(chan error, 1)
	go func() { _, err := h[0].Get(context.Background(), "never"); errc <- err }()
	time.Sleep(5 * time.Millisecond) // let Get start; the test passes either way
	h[0].Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: err = %v, want ErrClosed", err)
	}
}

func TestServerStopUnblocksClients(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Options{}) }()
	c, err := Dial(context.Background(), ln.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() { _, err := c.Get(context.Background(), "never"); errc <- err }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after ctx ended, want nil", err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Get when the server stops: err = %v, want ErrClosed", err)
	}
}

func TestAuth(t *testing.T) {
	right, wrong := []byte("right"), []byte("wrong")
	cases := []struct {
		name           string
		server, client []byte
		ok             bool
	}{
		{"none", nil, nil, true},
		{"match", right, right, true},
		{"wrong secret", right, wrong, false},
		{"client without secret", right, nil, false},
		{"server without secret", nil, right, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); Serve(ctx, ln, Options{Secret: c.server}) }()
			defer func() { cancel(); <-done }()
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer dcancel()
			cl, err := Dial(dctx, ln.Addr().String(), Options{Secret: c.client})
			if !c.ok {
				if !errors.Is(err, ErrAuth) {
					t.Fatalf("Dial: err = %v, want ErrAuth", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.Set(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A connection that skips authentication is refused before any write.
func TestUnauthenticatedWriteRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Secret: []byte("s")})
	go srv.Serve(context.Background(), ln)
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	if _, err := readMsg(br, DefaultMaxMessage); err != nil {
		t.Fatal(err)
	}
	conn.Write(appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), []byte("v")}}))
	r, err := readMsg(br, DefaultMaxMessage)
	if err != nil {
		t.Fatal(err)
	}
	if r.op != opErr || !errors.Is(remoteError(r), ErrAuth) {
		t.Fatalf("reply %v %q, want an auth error", r.op, r.args)
	}
	if n := srv.t.numKeys(); n != 0 {
		t.Fatalf("server holds %d keys after an unauthenticated Set", n)
	}
}

// Garbage on one connection drops that connection only.
func TestGarbageInput(t *testing.T) {
	inputs := map[string][]byte{
		"huge length":  {0xff, 0xff, 0xff, 0xff, 1},
		"unknown op":   appendMsg(nil, &msg{op: 77, id: 1}),
		"short header": {3, 0, 0, 0, 1, 2, 3},
		"arg overrun":  {15, 0, 0, 0, byte(opSet), 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 200, 0, 0, 0},
		"wrong nargs":  appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k")}}),
		"server op":    appendMsg(nil, &msg{op: opHello, id: 1}),
		"bad add":      appendMsg(nil, &msg{op: opAdd, id: 1, args: [][]byte{[]byte("k"), {1, 2}}}),
	}
	h := tcpHandles(t, 1, Options{MaxMessage: 1 << 20}, Options{})
	addr := h[0].(*Client).Addr()
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			if _, err := readMsg(br, DefaultMaxMessage); err != nil {
				t.Fatal(err)
			}
			conn.Write(in)
			for {
				r, err := readMsg(br, DefaultMaxMessage)
				if err != nil {
					break // connection dropped, as wanted
				}
				if r.op != opErr {
					t.Fatalf("garbage answered with %v", r.op)
				}
			}
			if err := h[0].Set(context.Background(), "still", []byte("up")); err != nil {
				t.Fatalf("server broken by garbage: %v", err)
			}
		})
	}
}

func TestTooLarge(t *testing.T) {
	h := tcpHandles(t, 1, Options{}, Options{MaxMessage: 1024})
	err := h[0].Set(context.Background(), "k", make([]byte, 2048))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Set of 2 KiB with a 1 KiB limit: err = %v, want ErrTooLarge", err)
	}
}

// Clients may start before the server: Dial retries until it is up.
func TestDialBeforeServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		c   *Client
		err error
	}
	dialed := make(chan res, 1)
	go func() { c, err := Dial(ctx, addr, Options{}); dialed <- res{c, err} }()
	time.Sleep(30 * time.Millisecond) // let a few dials fail; the test passes either way
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := NewServer(Options{})
	go srv.Serve(ctx, ln)
	defer srv.Close()
	r := <-dialed
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	if err := r.c.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
}

func TestDialTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = Dial(context.Background(), addr, Options{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nobody: err = %v, want DeadlineExceeded", err)
	}
}

func TestHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 5
	opts := Options{Secret: []byte("job")}
	c0, err := Host(ctx, "127.0.0.1:0", true, opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := c0.Addr()
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Go(func() {
			c, err := Host(ctx, addr, false, opts)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if err := c.Set(ctx, fmt.Sprint("rank", r), []byte{byte(r)}); err != nil {
				t.Error(err)
			}
			if _, err := c.Add(ctx, "arrived", 1); err != nil {
				t.Error(err)
			}
		})
	}
	keys := []string{}
	for r := 1; r < n; r++ {
		keys = append(keys, fmt.Sprint("rank", r))
	}
	if err := c0.Wait(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if v, err := c0.Add(ctx, "arrived", 0); err != nil || v != n-1 {
		t.Fatalf("arrived = %d, %v; want %d", v, err, n-1)
	}
	if err := c0.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(context.Background(), addr, Options{Secret: opts.Secret, Timeout: 50 * time.Millisecond}); err == nil {
		t.Fatal("server still up after the host's client closed")
	}
}

func TestDialAddr(t *testing.T) {
	cases := []struct{ in, want string }{
		{"0.0.0.0:80", "127.0.0.1:80"},
		{"[::]:81", "127.0.0.1:81"},
		{"10.1.2.3:82", "10.1.2.3:82"},
		{"[fe80::1]:83", "[fe80::1]:83"},
	}
	for _, c := range cases {
		a, err := net.ResolveTCPAddr("tcp", c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialAddr(a); got != c.want {
			t.Errorf("dialAddr(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestFileStoreCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	f, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Set(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(raw, 9, 0, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get(context.Background(), "k"); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Get on a corrupt log: err = %v, want ErrProtocol", err)
	}
}
