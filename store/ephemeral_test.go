package store

import (
	"context"
	"testing"
	"time"
)

// TestEphemeral: a key set with SetEphemeral goes when its client's
// connection ends, unless another client has set it since.
func TestEphemeral(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs := tcpHandles(t, 3, Options{}, Options{})
	a, b, c := hs[0].(*Client), hs[1].(*Client), hs[2].(*Client)
	if err := a.SetEphemeral(ctx, "alive/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := a.SetEphemeral(ctx, "alive/taken", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, "alive/taken", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "alive/a"); err != nil || string(v) != "1" {
		t.Fatalf("while a is connected: %q %v", v, err)
	}
	a.Close()
	// The server notices the closed connection asynchronously.
	absent := []byte{0}
	for {
		v, err := c.CompareSet(ctx, "alive/a", absent, absent)
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("alive/a outlived its client's connection")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if v, err := c.Get(ctx, "alive/taken"); err != nil || string(v) != "b" {
		t.Fatalf("a key set again by another client must stay: %q %v", v, err)
	}
}
