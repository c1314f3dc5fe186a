package ib

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Every message a rank sends to a peer lands in one of the peer's posted
// receive buffers (slots) and starts with a 48-byte header, little-endian:
//
//	0   kind u32        eager, rts, cts, credit, bye, rts-read or fin
//	4   rkey u32        cts: the key of the receive buffer; rts-read: of the send buffer
//	8   consumed u64    messages the sender has consumed from the receiver (credits)
//	16  tag u64         eager, rts: the tag; cts: the receive's id
//	24  n u64           eager: payload bytes that follow; rts: the message
//	                    length; cts: bytes to write
//	32  id u64          rts, cts, rts-read, fin: the send's id
//	40  addr u64        cts: the address to write to; rts-read: to read from
//
// A rendezvous by WRITE ends with an RDMA WRITE with immediate (the
// receive's id) that lands the data and consumes one receive buffer of the
// peer, so that the peer's completion queue says when the data is there.
// A rendezvous by READ (rts-read) ends with the receiver's RDMA READ and a
// fin message back, on which the send completes.
type kind uint32

const (
	kindEager kind = iota + 1
	kindRTS
	kindCTS
	kindCredit
	kindBye
	kindRTSRead // rts offering the sender's buffer for an RDMA READ
	kindFin     // the receiver has read send id
)

type header struct {
	kind     kind
	rkey     uint32
	consumed uint64
	tag      uint64
	n        uint64
	id       uint64
	addr     uint64
}

func (h *header) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(h.kind))
	le.PutUint32(b[4:], h.rkey)
	le.PutUint64(b[8:], h.consumed)
	le.PutUint64(b[16:], h.tag)
	le.PutUint64(b[24:], h.n)
	le.PutUint64(b[32:], h.id)
	le.PutUint64(b[40:], h.addr)
}

// parseHeader reads the header of a received message of got bytes in a
// slot of slotSize bytes, checking what a peer could get wrong.
func parseHeader(b []byte, got int, maxMessage int64) (header, error) {
	var h header
	if got < headerLen {
		return h, fmt.Errorf("%w: message of %d bytes, shorter than its header", transport.ErrProtocol, got)
	}
	le := binary.LittleEndian
	h.kind = kind(le.Uint32(b[0:]))
	h.rkey = le.Uint32(b[4:])
	h.consumed = le.Uint64(b[8:])
	h.tag = le.Uint64(b[16:])
	h.n = le.Uint64(b[24:])
	h.id = le.Uint64(b[32:])
	h.addr = le.Uint64(b[40:])
	switch h.kind {
	case kindEager:
		if h.n != uint64(got-headerLen) {
			return h, fmt.Errorf("%w: eager message announces %d bytes, carries %d", transport.ErrProtocol, h.n, got-headerLen)
		}
	case kindRTS, kindRTSRead:
		if h.n > uint64(maxMessage) {
			return h, fmt.Errorf("%w: message of %d bytes announced, limit %d", transport.ErrProtocol, h.n, maxMessage)
		}
	case kindCTS, kindCredit, kindBye, kindFin:
	default:
		return h, fmt.Errorf("%w: unknown message kind %d", transport.ErrProtocol, h.kind)
	}
	return h, nil
}

// qpInfo is what a rank publishes for one peer: where its queue pair for
// that peer is and how to reach it.
type qpInfo struct {
	lid   uint16
	gid   [16]byte
	qpn   uint32
	psn   uint32
	mtu   MTU
	slot  uint32 // SlotSize: the peer's must match
	depth uint32 // RecvDepth: the peer's must match
}

const (
	infoVersion = 1
	infoLen     = 1 + 2 + 16 + 4 + 4 + 1 + 4 + 4
	nonceLen    = 32
	macLen      = sha256.Size
)

func (q *qpInfo) marshal() []byte {
	b := make([]byte, 0, infoLen)
	b = append(b, infoVersion)
	b = binary.LittleEndian.AppendUint16(b, q.lid)
	b = append(b, q.gid[:]...)
	b = binary.LittleEndian.AppendUint32(b, q.qpn)
	b = binary.LittleEndian.AppendUint32(b, q.psn)
	b = append(b, byte(q.mtu))
	b = binary.LittleEndian.AppendUint32(b, q.slot)
	return binary.LittleEndian.AppendUint32(b, q.depth)
}

var errAuth = errors.New("authentication failed (wrong GOCCL_SECRET, or a stale or forged entry)")

func parseInfo(b []byte) (qpInfo, error) {
	var q qpInfo
	if len(b) != infoLen || b[0] != infoVersion {
		return q, fmt.Errorf("%w: queue pair information of %d bytes, want %d of version %d", transport.ErrProtocol, len(b), infoLen, infoVersion)
	}
	le := binary.LittleEndian
	q.lid = le.Uint16(b[1:])
	copy(q.gid[:], b[3:19])
	q.qpn = le.Uint32(b[19:])
	q.psn = le.Uint32(b[23:])
	q.mtu = MTU(b[27])
	q.slot = le.Uint32(b[28:])
	q.depth = le.Uint32(b[32:])
	if q.mtu.Bytes() == 0 {
		return q, fmt.Errorf("%w: MTU enum %d", transport.ErrProtocol, q.mtu)
	}
	return q, nil
}

// infoMAC authenticates rank from's information for rank to: HMAC-SHA256
// under the job's secret over the job, both ranks, the reader's fresh
// nonce and the information. Without the secret nobody can publish an
// entry that the reader accepts, and an entry from an earlier connection
// (another nonce) is refused.
func infoMAC(secret []byte, job string, from, to int, nonce, info []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("goccl ib qp"))
	var b [10]byte
	binary.LittleEndian.PutUint16(b[0:], uint16(len(job)))
	binary.LittleEndian.PutUint32(b[2:], uint32(from))
	binary.LittleEndian.PutUint32(b[6:], uint32(to))
	m.Write(b[:])
	m.Write([]byte(job))
	m.Write(nonce)
	m.Write(info)
	return m.Sum(nil)
}

// sealInfo is the value rank from publishes for rank to.
func sealInfo(secret []byte, job string, from, to int, nonce []byte, q *qpInfo) []byte {
	info := q.marshal()
	return append(info, infoMAC(secret, job, from, to, nonce, info)...)
}

// openInfo checks and parses what rank from published for rank to (this
// rank), whose nonce was nonce.
func openInfo(secret []byte, job string, from, to int, nonce, v []byte) (qpInfo, error) {
	if len(v) != infoLen+macLen {
		return qpInfo{}, fmt.Errorf("%w: entry of %d bytes", errAuth, len(v))
	}
	info, mac := v[:infoLen], v[infoLen:]
	if !hmac.Equal(mac, infoMAC(secret, job, from, to, nonce, info)) {
		return qpInfo{}, errAuth
	}
	return parseInfo(info)
}
