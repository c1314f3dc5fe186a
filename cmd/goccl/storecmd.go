package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/goccl/goccl/store"
)

const storeUsage = `usage: goccl store [flags]

Runs a standalone rendezvous key-value store until interrupted. Ranks reach
it at MASTER_ADDR:MASTER_PORT, as they would reach one hosted by rank 0.
A connection that does not authenticate within the handshake timeout
(GOCCL_HANDSHAKE_TIMEOUT, default 5s) is closed, and at most -max-pending
connections wait to authenticate at once.

flags:
`

// storeMain implements `goccl store`.
func storeMain(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return storeCommand(ctx, args, os.Stderr, nil)
}

// storeCommand is storeMain with its log and a hook that learns the
// listening address, for tests.
func storeCommand(ctx context.Context, args []string, stderr io.Writer, listening func(net.Addr)) int {
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, storeUsage)
		fs.PrintDefaults()
	}
	addr := fs.String("addr", ":29500", "address to listen on (\":29500\": every interface; give a host to listen on one)")
	secretFile := fs.String("secret-file", "", "file holding the shared secret clients must prove (trailing newline ignored)")
	handshake := fs.Duration("handshake-timeout", 0, "close a connection that has not authenticated (or sent its first message) after this long (default: $"+store.EnvHandshakeTimeout+", else "+store.DefaultHandshakeTimeout.String()+")")
	maxPending := fs.Int("max-pending", store.DefaultMaxPending, "most connections waiting to authenticate at once; more are closed as they arrive")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "goccl store: unexpected arguments %q\n", fs.Args())
		return 2
	}
	opts := store.Options{
		HandshakeTimeout: *handshake,
		MaxPending:       *maxPending,
		Logger:           slog.New(slog.NewTextHandler(stderr, nil)),
	}
	if opts.HandshakeTimeout < 0 || opts.MaxPending < 1 {
		fmt.Fprintln(stderr, "goccl store: -handshake-timeout and -max-pending must be positive")
		return 2
	}
	if v := os.Getenv(store.EnvHandshakeTimeout); opts.HandshakeTimeout == 0 && v != "" {
		d, err := store.ParseHandshakeTimeout(v)
		if err != nil {
			fmt.Fprintf(stderr, "goccl store: %v\n", err)
			return 2
		}
		opts.HandshakeTimeout = d
	}
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			fmt.Fprintf(stderr, "goccl store: %v\n", err)
			return 1
		}
		opts.Secret = bytes.TrimRight(b, "\r\n")
		if len(opts.Secret) == 0 {
			fmt.Fprintf(stderr, "goccl store: secret file %s is empty\n", *secretFile)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "goccl store: %v\n", err)
		return 1
	}
	auth := "no secret"
	if opts.Secret != nil {
		auth = "secret from " + *secretFile
	}
	fmt.Fprintf(stderr, "goccl store: listening on %s (%s; handshake timeout %v, at most %d waiting)\n",
		ln.Addr(), auth, cmp.Or(opts.HandshakeTimeout, store.DefaultHandshakeTimeout), opts.MaxPending)
	if listening != nil {
		listening(ln.Addr())
	}
	if err := store.Serve(ctx, ln, opts); err != nil {
		fmt.Fprintf(stderr, "goccl store: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, "goccl store: stopped")
	return 0
}
