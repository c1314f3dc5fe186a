package transport

import "sync/atomic"

// CountingEndpoint wraps an Endpoint and counts the messages and bytes it
// sends to and receives from each peer. Operations are counted when they are
// started (Isend, Irecv), whether or not they later succeed, so the figures
// are the wire volume an algorithm asked for: arithmetic that tests compare
// with a cost formula.
type CountingEndpoint struct {
	Endpoint
	peers []peerCounters
}

type peerCounters struct {
	sentMsgs, sentBytes, recvMsgs, recvBytes atomic.Int64
}

// PeerStats is the traffic between this endpoint and one peer.
type PeerStats struct {
	SentMsgs, SentBytes int64
	RecvMsgs, RecvBytes int64
}

// Stats is a snapshot of a CountingEndpoint's counters, indexed by peer.
type Stats struct {
	Peers []PeerStats
}

// Total sums the counters over all peers.
func (s Stats) Total() PeerStats {
	var t PeerStats
	for _, p := range s.Peers {
		t.SentMsgs += p.SentMsgs
		t.SentBytes += p.SentBytes
		t.RecvMsgs += p.RecvMsgs
		t.RecvBytes += p.RecvBytes
	}
	return t
}

var _ Endpoint = (*CountingEndpoint)(nil)

// Counting wraps ep so that its traffic is counted.
func Counting(ep Endpoint) *CountingEndpoint {
	return &CountingEndpoint{Endpoint: ep, peers: make([]peerCounters, ep.Size())}
}

// Isend counts the message and passes it on.
func (c *CountingEndpoint) Isend(to int, tag Tag, b []byte) Request {
	if to >= 0 && to < len(c.peers) {
		c.peers[to].sentMsgs.Add(1)
		c.peers[to].sentBytes.Add(int64(len(b)))
	}
	return c.Endpoint.Isend(to, tag, b)
}

// Irecv counts the message and passes it on.
func (c *CountingEndpoint) Irecv(from int, tag Tag, b []byte) Request {
	if from >= 0 && from < len(c.peers) {
		c.peers[from].recvMsgs.Add(1)
		c.peers[from].recvBytes.Add(int64(len(b)))
	}
	return c.Endpoint.Irecv(from, tag, b)
}

var _ VecEndpoint = (*CountingEndpoint)(nil)

// IsendV counts the vectored message as one and passes it on: vectored
// where the wrapped endpoint has vectored messages, else packed
// (PackedSendV).
func (c *CountingEndpoint) IsendV(to int, tag Tag, bufs [][]byte) Request {
	if to >= 0 && to < len(c.peers) {
		c.peers[to].sentMsgs.Add(1)
		c.peers[to].sentBytes.Add(int64(VecLen(bufs)))
	}
	if v, ok := c.Endpoint.(VecEndpoint); ok {
		return v.IsendV(to, tag, bufs)
	}
	return PackedSendV(c.Endpoint, to, tag, bufs)
}

// IrecvV counts the vectored receive as one and passes it on, as IsendV
// does.
func (c *CountingEndpoint) IrecvV(from int, tag Tag, bufs [][]byte) Request {
	if from >= 0 && from < len(c.peers) {
		c.peers[from].recvMsgs.Add(1)
		c.peers[from].recvBytes.Add(int64(VecLen(bufs)))
	}
	if v, ok := c.Endpoint.(VecEndpoint); ok {
		return v.IrecvV(from, tag, bufs)
	}
	return PackedRecvV(c.Endpoint, from, tag, bufs)
}

// Vectored is the wrapped endpoint's answer, or false where it has no
// vectored messages.
func (c *CountingEndpoint) Vectored(peer int) bool {
	v, ok := c.Endpoint.(VecEndpoint)
	return ok && v.Vectored(peer)
}

// Stats returns a snapshot of the counters.
func (c *CountingEndpoint) Stats() Stats {
	s := Stats{Peers: make([]PeerStats, len(c.peers))}
	for i := range c.peers {
		p := &c.peers[i]
		s.Peers[i] = PeerStats{
			SentMsgs: p.sentMsgs.Load(), SentBytes: p.sentBytes.Load(),
			RecvMsgs: p.recvMsgs.Load(), RecvBytes: p.recvBytes.Load(),
		}
	}
	return s
}

// Reset sets every counter to zero.
func (c *CountingEndpoint) Reset() {
	for i := range c.peers {
		p := &c.peers[i]
		p.sentMsgs.Store(0)
		p.sentBytes.Store(0)
		p.recvMsgs.Store(0)
		p.recvBytes.Store(0)
	}
}
