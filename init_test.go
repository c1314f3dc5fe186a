package goccl

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/reduceop"
)

// TestInitMemWithoutLauncher holds the README to its word: with transport
// mem and no launcher variables, Init is a one-rank job in this process,
// and its debug log says so.
func TestInitMemWithoutLauncher(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"GOCCL_TRANSPORT", []Option{fakeEnv(map[string]string{"GOCCL_TRANSPORT": "mem", EnvDebug: "info"})}},
		{"WithTransport", []Option{fakeEnv(map[string]string{EnvDebug: "info"}), WithTransport("mem")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c, err := Init(t.Context(), append(tt.opts, withDebugOutput(&buf))...)
			if err != nil {
				t.Fatalf("Init: %v", err)
			}
			defer c.Close()
			if c.Rank() != 0 || c.Size() != 1 {
				t.Errorf("rank %d of %d; want 0 of 1", c.Rank(), c.Size())
			}
			x := []float32{3, -1}
			if err := c.AllReduce(t.Context(), x, reduceop.Avg); err != nil {
				t.Fatalf("AllReduce: %v", err)
			}
			if x[0] != 3 || x[1] != -1 {
				t.Errorf("AllReduce(Avg) over one rank = %v; want [3 -1]", x)
			}
			out := buf.String()
			for _, want := range []string{"one-rank job in this process", "launcher=none", "transport=mem"} {
				if !strings.Contains(out, want) {
					t.Errorf("debug log has no %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestInitMemWithoutLauncherQuiet: the one-rank job logs nothing unless
// GOCCL_DEBUG asks.
func TestInitMemWithoutLauncherQuiet(t *testing.T) {
	var buf bytes.Buffer
	c, err := Init(t.Context(), fakeEnv(map[string]string{"GOCCL_TRANSPORT": "mem"}), withDebugOutput(&buf))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	c.Close()
	if buf.Len() != 0 {
		t.Errorf("logged without GOCCL_DEBUG:\n%s", buf.String())
	}
}

// TestInitNoLauncher: without launcher variables and without mem, Init
// fails at once and says every way to get a job.
func TestInitNoLauncher(t *testing.T) {
	for _, env := range []map[string]string{nil, {"GOCCL_TRANSPORT": "tcp"}} {
		c, err := Init(t.Context(), fakeEnv(env))
		if err == nil {
			c.Close()
			t.Fatalf("env %v: Init succeeded without a launcher", env)
		}
		if testing.Verbose() {
			t.Log(err)
		}
		if !errors.Is(err, launch.ErrNotFound) {
			t.Errorf("env %v: %v does not wrap launch.ErrNotFound", env, err)
		}
		for _, want := range []string{"goccl run -n N", "torchrun", "mpirun", "srun", "RANK", "WORLD_SIZE", "MASTER_ADDR", "GOCCL_TRANSPORT=mem", "one-rank job"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("env %v: error does not say %q: %v", env, want, err)
			}
		}
	}
}

// TestInitMemWithLauncher: launcher variables still rule; mem cannot run
// a world of several processes, and says what to use instead.
func TestInitMemWithLauncher(t *testing.T) {
	env := map[string]string{"GOCCL_TRANSPORT": "mem", "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
	c, err := Init(t.Context(), fakeEnv(env))
	if err == nil {
		c.Close()
		t.Fatal("Init over mem with WORLD_SIZE=2 succeeded")
	}
	if !strings.Contains(err.Error(), "NewLocal") {
		t.Errorf("error does not point at NewLocal: %v", err)
	}
}
