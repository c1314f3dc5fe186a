package tcp

import (
	"testing"
	"time"
)

// TestGuardDefaults: the handshake timeout comes from the Config, else
// GOCCL_HANDSHAKE_TIMEOUT (a duration or seconds), else the default; the
// cap on connections in their handshake leaves room for every link the
// rank accepts.
func TestGuardDefaults(t *testing.T) {
	for _, c := range []struct {
		env  string
		set  time.Duration
		want time.Duration
	}{
		{"", 0, DefaultHandshakeTimeout},
		{"300ms", 0, 300 * time.Millisecond},
		{"2", 0, 2 * time.Second},
		{"0.5", 0, 500 * time.Millisecond},
		{"bogus", 0, DefaultHandshakeTimeout},
		{"-1s", 0, DefaultHandshakeTimeout},
		{"300ms", time.Minute, time.Minute},
	} {
		t.Setenv(EnvHandshakeTimeout, c.env)
		cfg := Config{Rank: 1, Size: 2, HandshakeTimeout: c.set}
		cfg.defaults()
		if cfg.HandshakeTimeout != c.want {
			t.Errorf("%s=%q, HandshakeTimeout %v: got %v, want %v", EnvHandshakeTimeout, c.env, c.set, cfg.HandshakeTimeout, c.want)
		}
	}
	for _, c := range []struct{ rank, streams, set, want int }{
		{1, 1, 0, DefaultMaxPending},
		{100, 2, 0, DefaultMaxPending},
		{300, 1, 0, 300},
		{300, 4, 0, 1200},
		{5, 1, 7, 7},
		{5, 1, -1, -1},
	} {
		cfg := Config{Rank: c.rank, Size: c.rank + 1, Streams: c.streams, MaxPending: c.set}
		cfg.defaults()
		if cfg.MaxPending != c.want {
			t.Errorf("rank %d, %d streams, MaxPending %d: got %d, want %d", c.rank, c.streams, c.set, cfg.MaxPending, c.want)
		}
	}
}
