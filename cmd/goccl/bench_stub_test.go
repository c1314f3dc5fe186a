//go:build !ibverbs

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchIBNotBuilt: without the ibverbs tag, -transport ib is refused
// before any rank starts, saying how to build a goccl that has it.
func TestBenchIBNotBuilt(t *testing.T) {
	for _, args := range [][]string{{"-transport", "ib"}, {"-transport", "ib", "-join"}} {
		var out, errb bytes.Buffer
		code := benchMain(context.Background(), args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "built without InfiniBand verbs") || !strings.Contains(errb.String(), "-tags ibverbs") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and how to build with -tags ibverbs", args, code, errb.String())
		}
	}
}
