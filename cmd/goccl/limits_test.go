package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// The loopback tests in one process, and the two roles that goccl limits
// runs as separate processes (here as goroutines): the answering side
// prints its address, the measuring side prints three positive figures.
func TestLimitsLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n, runs = 1 << 16, 2
	f, err := loopbackInProcess(ctx, n, runs)
	if err != nil || f.tput <= 0 || f.bidi <= 0 || f.rtt <= 0 {
		t.Fatalf("in one process: %+v, %v", f, err)
	}

	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- loopbackServer(ctx, n, pw)
		pw.Close()
	}()
	addr, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	var out strings.Builder
	if err := loopbackClient(ctx, strings.TrimSpace(addr), n, runs, &out); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("answering side: %v", err)
	}
	var g loopbackFigures
	if _, err := fmt.Sscan(out.String(), &g.tput, &g.bidi, &g.rtt, &g.swap); err != nil || g.tput <= 0 || g.bidi <= 0 || g.rtt <= 0 || g.swap <= 0 {
		t.Fatalf("measuring side printed %q (%v)", out.String(), err)
	}
}
