package store

import (
	"context"
	"net"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestListenHosts(t *testing.T) {
	cases := []struct {
		host, bind string
		want       []string
		every      bool // falls back to every interface, saying why
	}{
		{"", "", []string{""}, false},
		{"0.0.0.0", "", []string{""}, false},
		{"::", "", []string{""}, false},
		{"127.0.0.1", "", []string{"127.0.0.1"}, false},
		{"127.0.0.2", "", []string{"127.0.0.2"}, false},
		{"10.1.2.3", "0.0.0.0", []string{"0.0.0.0"}, false},
		{"127.0.0.1", "127.0.0.3", []string{"127.0.0.3"}, false},
		{"192.0.2.1", "", []string{""}, true}, // TEST-NET-1: no machine holds it
		{"no-such-host.invalid", "", []string{""}, true},
	}
	for _, c := range cases {
		got, why := listenHosts(c.host, c.bind)
		if !slices.Equal(got, c.want) || (why != "") != c.every {
			t.Errorf("listenHosts(%q, %q) = %q, %q; want %q (falls back: %v)", c.host, c.bind, got, why, c.want, c.every)
		}
	}
	// localhost: its loopback addresses.
	got, why := listenHosts("localhost", "")
	if why != "" || len(got) == 0 {
		t.Fatalf("listenHosts(localhost) = %q, %q", got, why)
	}
	for _, h := range got {
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			t.Errorf("listenHosts(localhost) = %q: %s is not loopback", got, h)
		}
	}
	// This machine's name: its own addresses other than loopback, or every
	// interface when it resolves to loopback only (Debian's 127.0.1.1).
	if name, err := os.Hostname(); err == nil {
		got, why := listenHosts(name, "")
		for _, h := range got {
			if ip := net.ParseIP(h); h != "" && (ip == nil || ip.IsLoopback() || !isLocalIP(ip)) {
				t.Errorf("listenHosts(%s) = %q: %s is not an address of this machine", name, got, h)
			}
		}
		t.Logf("listenHosts(%s) = %q %s", name, got, why)
	}
}

// TestHostListensOnItsAddress: rank 0's server listens on the address it
// was given, not on every interface: on Linux, where all of 127.0.0.0/8
// is this machine, a server at 127.0.0.1 must not answer at 127.0.0.2.
func TestHostListensOnItsAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 to be this machine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c0, err := Host(ctx, "127.0.0.1:0", true, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	_, port, _ := net.SplitHostPort(c0.Addr())
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.2", port)); err == nil {
		c.Close()
		t.Fatalf("the store at 127.0.0.1:%s also answers at 127.0.0.2", port)
	}
	// Asked for every interface, it answers there too.
	c1, err := Host(ctx, "127.0.0.1:0", true, Options{Logger: quiet, ListenHost: "0.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	_, port, _ = net.SplitHostPort(c1.Addr())
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.2", port))
	if err != nil {
		t.Fatalf("the store asked to listen on 0.0.0.0 does not answer at 127.0.0.2: %v", err)
	}
	c.Close()
}
