package ring_test

import (
	"context"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/ring"
)

// vecPeers gives algotest's Peers vectored messages (algo.VecPeers), as
// goccl's do over a transport.VecEndpoint: a vectored message is one
// message on the wire, here packed by the test.
type vecPeers struct{ algo.Peers }

func (p vecPeers) Vectored(int) bool { return true }

func (p vecPeers) IsendV(to int, bufs [][]byte) algo.Request {
	var m []byte
	for _, b := range bufs {
		m = append(m, b...)
	}
	return p.Isend(to, m)
}

func (p vecPeers) IrecvV(from int, bufs [][]byte) algo.Request {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	m := make([]byte, n)
	return scatterReq{p.Irecv(from, m), m, bufs}
}

type scatterReq struct {
	algo.Request
	m    []byte
	bufs [][]byte
}

func (r scatterReq) Wait(ctx context.Context) error {
	if err := r.Request.Wait(ctx); err != nil {
		return err
	}
	m := r.m
	for _, b := range r.bufs {
		m = m[copy(b, m):]
	}
	return nil
}

func TestAllReduceVecVectored(t *testing.T) {
	for name, o := range variants {
		t.Run(name, func(t *testing.T) {
			algotest.TestAllReduce(t, func(ctx context.Context, p algo.Peers, buf []byte) error {
				return pieced(p, buf, func(v algo.Vec) error { return o.AllReduceVec(ctx, vecPeers{p}, v) })
			})
		})
	}
}

func TestAllGatherVecVectored(t *testing.T) {
	algotest.TestAllGather(t, func(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
		return pieced(p, buf, func(v algo.Vec) error { return ring.Options{}.AllGatherVec(ctx, vecPeers{p}, v, counts) })
	})
}

// Over Peers with vectored messages, a Vec of many pieces sends what the
// flat buffer sends, message for message: the transcript of AllReduceVec
// over ten pieces of one element is the golden one of AllReduce (over
// Peers without them, each piece of a range is a message of its own).
func TestAllReduceVecVectoredTranscript(t *testing.T) {
	run := func(fn func(ctx context.Context, p algo.Peers, buf []byte) error) string {
		w := algotest.World{Size: 4, ElemSize: 8, Reduce: algotest.SumInt64, Record: true}
		st, err := w.Run(context.Background(), func(ctx context.Context, p algo.Peers) error {
			return fn(ctx, p, make([]byte, 10*8))
		})
		if err != nil {
			t.Fatal(err)
		}
		return st.TranscriptText()
	}
	flat := run(ring.AllReduce)
	vec := run(func(ctx context.Context, p algo.Peers, buf []byte) error {
		var parts [][]byte
		for i := 0; i < len(buf); i += 8 {
			parts = append(parts, buf[i:i+8])
		}
		return ring.Options{}.AllReduceVec(ctx, vecPeers{p}, algo.Pieces(parts))
	})
	if flat != vec {
		t.Fatalf("AllReduceVec over vectored Peers sends\n%s\nAllReduce sends\n%s", vec, flat)
	}
}
