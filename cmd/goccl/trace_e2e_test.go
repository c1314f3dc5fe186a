package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// The recorder's real dumps feed the analyzer: four ranks make eleven
// identical allreduces, rank 1 then stalls while the others enter the
// twelfth; the timeout aborts the communicator, every rank dumps, and the
// analyzer names rank 1 and call #12.
func TestTraceRecorderToAnalyzer(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"GOCCL_TRACE_DIR": dir}
	comms, err := goccl.NewLocal(4, goccl.WithTimeout(time.Second),
		goccl.WithGetenv(func(k string) string { return env[k] }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := 12
			if r == 1 {
				calls = 11
			}
			for range calls {
				if err := c.AllReduce(ctx, make([]float32, 8), reduceop.Sum); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	var out, errOut bytes.Buffer
	code := traceMain([]string{"analyze", dir}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (a problem):\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"#12", "rank 1 never entered it", "everyone waits on rank 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("verdict does not say %q:\n%s", want, out.String())
		}
	}
}
