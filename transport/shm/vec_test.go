//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// TestVectoredPulled: a vectored message of CMAThreshold bytes or more is
// pulled as one message, with one descriptor of several buffers (one
// CMARecvs for 16 pieces, not 16), straight into the pieces of a
// vectored receive; one of more pieces than a descriptor holds goes by
// copy through the ring, whole.
func TestVectoredPulled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps := connectAll(t, 2, shm.Config{})
	var ep0, ep1 transport.VecEndpoint = eps[0], eps[1]
	if !ep0.Vectored(1) || !ep1.Vectored(0) || ep0.Vectored(0) {
		t.Fatalf("Vectored: %v %v %v", ep0.Vectored(1), ep1.Vectored(0), ep0.Vectored(0))
	}
	for _, tc := range []struct {
		pieces, size int
		pulled       bool
	}{{16, 1 << 20, true}, {1024, 1 << 10, false}, {2, 4 << 20, true}} {
		before0, before1 := eps[0].Stats(), eps[1].Stats()
		msg := make([]byte, tc.pieces*tc.size)
		for i := range msg {
			msg[i] = byte(i*31 + i>>12)
		}
		got := make([]byte, len(msg))
		var send, recv [][]byte
		for i := range tc.pieces {
			send = append(send, msg[i*tc.size:(i+1)*tc.size])
		}
		// The receive cut in other places: 3 pieces, one empty.
		third := len(got) / 3
		recv = [][]byte{got[:third], got[third:third], got[third:]}
		r := ep1.IrecvV(0, 9, recv)
		s := ep0.IsendV(1, 9, send)
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("%d pieces of %d: corrupt", tc.pieces, tc.size)
		}
		after0, after1 := eps[0].Stats(), eps[1].Stats()
		pulled := after1.CMARecvs - before1.CMARecvs
		copied := after0.CopySends - before0.CopySends
		if tc.pulled && (pulled != 1 || after0.CMASends-before0.CMASends != 1 || copied != 0) {
			t.Fatalf("%d pieces of %d: %d pulled, %d copied; want one message pulled", tc.pieces, tc.size, pulled, copied)
		}
		if !tc.pulled && (pulled != 0 || copied != 1) {
			t.Fatalf("%d pieces of %d: %d pulled, %d copied; want one message copied", tc.pieces, tc.size, pulled, copied)
		}
	}
}
