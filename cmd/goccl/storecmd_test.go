package main

import (
	"context"
	"errors"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/store"
)

func TestStoreCommand(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	var log testutil.Buffer
	done := make(chan int, 1)
	go func() {
		done <- storeCommand(ctx, []string{"-addr", "127.0.0.1:0", "-secret-file", secret}, &log, func(a net.Addr) { addrc <- a })
	}()
	var addr string
	select {
	case a := <-addrc:
		addr = a.String()
	case code := <-done:
		t.Fatalf("goccl store exited with %d: %s", code, log.String())
	}
	c, err := store.Dial(ctx, addr, store.Options{Secret: []byte("hunter2")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctx, "n", 2); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "n"); err != nil || string(v) != "2" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	c.Close()
	if _, err := store.Dial(ctx, addr, store.Options{Secret: []byte("hunter3")}); !errors.Is(err, store.ErrAuth) {
		t.Fatalf("Dial with a wrong secret: err = %v, want ErrAuth", err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d after interrupt: %s", code, log.String())
	}
	if !strings.Contains(log.String(), "listening on "+addr) {
		t.Errorf("log lacks the address: %s", log.String())
	}
}

func TestStoreCommandErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-addr", "not an address"}, 1, "goccl store:"},
		{[]string{"-secret-file", "/nonexistent"}, 1, "/nonexistent"},
		{[]string{"-secret-file", empty}, 1, "empty"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-bogus"}, 2, "bogus"},
	}
	for _, c := range cases {
		var log testutil.Buffer
		code := storeCommand(context.Background(), c.args, &log, nil)
		if code != c.code || !strings.Contains(log.String(), c.msg) {
			t.Errorf("goccl store %q = %d, log %q; want %d and %q", c.args, code, log.String(), c.code, c.msg)
		}
	}
}

// TestStoreCommandHandshakeTimeout: -handshake-timeout (or
// GOCCL_HANDSHAKE_TIMEOUT) bounds how long `goccl store` keeps a
// connection that does not authenticate.
func TestStoreCommandHandshakeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"-handshake-timeout", "200ms"}, ""},
		{"env", nil, "0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(store.EnvHandshakeTimeout, tc.env)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addrc := make(chan net.Addr, 1)
			var log testutil.Buffer
			done := make(chan int, 1)
			go func() {
				done <- storeCommand(ctx, append([]string{"-addr", "127.0.0.1:0"}, tc.args...), &log, func(a net.Addr) { addrc <- a })
			}()
			var addr string
			select {
			case a := <-addrc:
				addr = a.String()
			case code := <-done:
				t.Fatalf("goccl store exited with %d: %s", code, log.String())
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Under the default of 5 s, so that it fails if the setting is
			// ignored.
			bound := store.DefaultHandshakeTimeout - time.Second
			c.SetReadDeadline(time.Now().Add(bound))
			if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a silent connection is still open after %v", bound)
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit code %d: %s", code, log.String())
			}
			if !strings.Contains(log.String(), "handshake timeout 200ms") {
				t.Errorf("log lacks the timeout: %s", log.String())
			}
		})
	}
	t.Setenv(store.EnvHandshakeTimeout, "soon")
	var log testutil.Buffer
	if code := storeCommand(context.Background(), []string{"-addr", "127.0.0.1:0"}, &log, nil); code != 2 || !strings.Contains(log.String(), store.EnvHandshakeTimeout) {
		t.Errorf("GOCCL_HANDSHAKE_TIMEOUT=soon: exit %d, log %q; want 2 and the variable named", code, log.String())
	}
}
