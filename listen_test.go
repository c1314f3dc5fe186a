package goccl_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/store"
)

// TestInitStoreGuard: the store that rank 0 hosts for Init listens on
// MASTER_ADDR only (on every interface when GOCCL_STORE_BIND=0.0.0.0),
// and closes connections that do not authenticate within
// GOCCL_HANDSHAKE_TIMEOUT, while the job runs collectives. (The floods of
// 2000 connections are in the store and transport/tcp packages'
// TestUnauthenticatedFlood and TestStrangerFlood.)
func TestInitStoreGuard(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs 127.0.0.2 to be this machine")
	}
	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		name, bind string
		everywhere bool
	}{
		{"master-addr", "", false},
		{"bind-all", "0.0.0.0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := freePort(t)
			getenv := func(k string) string {
				switch k {
				case "GOCCL_HANDSHAKE_TIMEOUT":
					return deadline.String()
				case "GOCCL_STORE_BIND":
					return tc.bind
				case "GOCCL_SECRET":
					return "guard"
				}
				return ""
			}
			const size = 2
			comms := make([]*goccl.Comm, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				wg.Go(func() {
					comms[r], errs[r] = goccl.Init(ctx, goccl.WithGetenv(getenv), goccl.WithEnv(goccl.Env{
						Rank: r, Size: size, LocalRank: r, LocalSize: size,
						MasterAddr: "127.0.0.1", MasterPort: port, Source: "options"}))
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			other := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
			c, err := net.Dial("tcp", other)
			if err == nil {
				c.Close()
			}
			if tc.everywhere != (err == nil) {
				t.Errorf("store answers at %s: %v, want %v (GOCCL_STORE_BIND=%q)", other, err == nil, tc.everywhere, tc.bind)
			}

			// Silent connections to the store while the ranks run
			// collectives: each is closed by the deadline (polled with a
			// generous bound); the collectives are not disturbed.
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			var silent []net.Conn
			for range 50 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				silent = append(silent, c)
			}
			for r, comm := range comms {
				wg.Go(func() {
					for i := range 20 {
						buf := []float64{float64(r + i)}
						if err := comm.AllReduce(ctx, buf, reduceop.Sum); err != nil {
							errs[r] = err
							return
						}
						if want := float64(1 + 2*i); buf[0] != want {
							errs[r] = errors.New("wrong sum " + strconv.FormatFloat(buf[0], 'g', -1, 64))
							return
						}
					}
				})
			}
			// The bound is generous but under the default timeout, so that
			// it fails if Init does not pass GOCCL_HANDSHAKE_TIMEOUT on.
			bound := store.DefaultHandshakeTimeout - time.Second
			for i, c := range silent {
				c.SetReadDeadline(time.Now().Add(bound))
				if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("silent connection %d to the store still open after %v", i, bound)
				}
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestInitBadHandshakeTimeout: a GOCCL_HANDSHAKE_TIMEOUT that is not a
// positive duration fails Init, naming the variable.
func TestInitBadHandshakeTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	getenv := func(k string) string {
		if k == "GOCCL_HANDSHAKE_TIMEOUT" {
			return "soon"
		}
		return ""
	}
	c, err := goccl.Init(ctx, goccl.WithGetenv(getenv), goccl.WithEnv(goccl.Env{
		Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, MasterAddr: "127.0.0.1", MasterPort: freePort(t), Source: "options"}))
	if err == nil {
		c.Close()
		t.Fatal("Init accepted GOCCL_HANDSHAKE_TIMEOUT=soon")
	}
	if !strings.Contains(err.Error(), "GOCCL_HANDSHAKE_TIMEOUT") {
		t.Fatalf("Init: %v; want an error naming GOCCL_HANDSHAKE_TIMEOUT", err)
	}
}
