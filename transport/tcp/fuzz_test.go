package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// FuzzFrames feeds arbitrary bytes to a connection's reader, as a broken or
// hostile peer would: the endpoint must never panic, a posted receive must
// end (data, ErrProtocol or ErrPeerClosed) once the stream ends, and Close
// must return.
func FuzzFrames(f *testing.F) {
	frame := func(tag, n uint64, payload string) []byte {
		var b []byte
		for _, v := range []uint64{tag, n} {
			for i := 0; i < 8; i++ {
				b = append(b, byte(v>>(8*i)))
			}
		}
		return append(b, payload...)
	}
	f.Add(frame(1, 3, "abc"))
	f.Add(frame(1, 5, "abc"))                                      // truncated
	f.Add(frame(1, 2, "ab"))                                       // wrong length for the receive
	f.Add(append(frame(2, 1, "x"), frame(1, 3, "abc")...))         // another tag first
	f.Add(frame(1, 1<<40, ""))                                     // over MaxMessage
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))             // a stranger
	f.Add(append(frame(1, 3, "abc"), frame(1, 0xffffffff, "")...)) // garbage after a good frame
	f.Fuzz(func(t *testing.T, data []byte) {
		e, raw := pipeEndpoint(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r := e.Irecv(1, 1, make([]byte, 3))
		raw.SetWriteDeadline(time.Now().Add(time.Second))
		raw.Write(data) // may stop early once the reader gives up
		raw.Close()
		err := r.Wait(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive did not end after the stream closed")
		}
		if err != nil && !errors.Is(err, transport.ErrProtocol) && !errors.Is(err, transport.ErrPeerClosed) {
			t.Fatalf("receive failed with %v, want ErrProtocol or ErrPeerClosed", err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}
