package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/goccl/goccl/store"
)

const storeUsage = `usage: goccl store [flags]

Runs a standalone rendezvous key-value store until interrupted. Ranks reach
it at MASTER_ADDR:MASTER_PORT, as they would reach one hosted by rank 0.

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
	addr := fs.String("addr", ":29500", "address to listen on")
	secretFile := fs.String("secret-file", "", "file holding the shared secret clients must prove (trailing newline ignored)")
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
	var opts store.Options
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
	fmt.Fprintf(stderr, "goccl store: listening on %s (%s)\n", ln.Addr(), auth)
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
