package ib

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Connect joins the mesh over reliable-connected queue pairs, one per
// peer. It opens the device (Config.HCA, GOCCL_IB_HCA, or the first active
// port), creates a completion queue and a queue pair per peer, moves each
// to INIT and posts its receive buffers, then exchanges through cfg.KV:
//
//  1. every rank publishes a fresh random nonce (key ib/nonce/<rank>);
//  2. every rank publishes, for each peer, its LID, GID, queue pair number,
//     starting PSN, port MTU, slot size and receive depth, sealed with
//     HMAC-SHA256 under cfg.Secret over the job, both ranks and the
//     peer's nonce (key ib/qp/<rank>/<peer>);
//  3. every rank checks each peer's entry against its own nonce, moves the
//     queue pair to RTR (path MTU: the smaller of the two ports') and RTS
//     (cfg.Timeout, cfg.RetryCount, cfg.RNRRetry), and publishes that it
//     is ready (key ib/ready/<rank>);
//  4. every rank waits until each peer is ready, so no packet reaches a
//     queue pair that cannot take it yet.
//
// A peer whose entry fails authentication fails Connect with an error
// naming it. Connect gives up when ctx ends or cfg.InitTimeout passes,
// freeing what it made.
func Connect(ctx context.Context, cfg Config) (*Endpoint, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if err := cfg.defaults(getenv); err != nil {
		return nil, err
	}
	name, port, err := cfg.device()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.InitTimeout)
	defer cancel()

	dev, err := cfg.Provider.Open(name, port, cfg.GIDIndex)
	if err != nil {
		return nil, fmt.Errorf("ib: rank %d open device %q: %w", cfg.Rank, cfg.HCA, err)
	}
	e, err := newEndpoint(&cfg, dev) // on failure it has closed dev
	if err != nil {
		return nil, fmt.Errorf("ib: rank %d: %w", cfg.Rank, err)
	}
	if err := e.exchange(ctx); err != nil {
		e.release()
		return nil, fmt.Errorf("ib: rank %d connect: %w", cfg.Rank, err)
	}
	e.start()
	return e, nil
}

// exchange runs steps 1 to 4 of Connect.
func (e *Endpoint) exchange(ctx context.Context) error {
	cfg := e.cfg
	if cfg.Size == 1 {
		return nil
	}
	nonce := make([]byte, nonceLen)
	rand.Read(nonce)
	if err := cfg.KV.Set(ctx, nonceKey(cfg.Rank), nonce); err != nil {
		return fmt.Errorf("publish nonce: %w", err)
	}
	pi := e.dev.Port()
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		theirs, err := cfg.KV.Get(ctx, nonceKey(p.rank))
		if err != nil {
			return &transport.PeerError{Op: "exchange", Peer: p.rank, Err: fmt.Errorf("nonce: %w", err)}
		}
		var psn [4]byte
		rand.Read(psn[:])
		p.psn = binary.LittleEndian.Uint32(psn[:]) & 0xffffff
		mine := qpInfo{lid: pi.LID, gid: pi.GID, qpn: p.qp.Num(), psn: p.psn, mtu: pi.MTU,
			slot: uint32(cfg.SlotSize), depth: uint32(cfg.RecvDepth)}
		v := sealInfo(cfg.Secret, cfg.JobID, cfg.Rank, p.rank, theirs, &mine)
		if err := cfg.KV.Set(ctx, infoKey(cfg.Rank, p.rank), v); err != nil {
			return fmt.Errorf("publish queue pair for rank %d: %w", p.rank, err)
		}
	}
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		v, err := cfg.KV.Get(ctx, infoKey(p.rank, cfg.Rank))
		if err != nil {
			return &transport.PeerError{Op: "exchange", Peer: p.rank, Err: err}
		}
		q, err := openInfo(cfg.Secret, cfg.JobID, p.rank, cfg.Rank, nonce, v)
		if err != nil {
			return &transport.PeerError{Op: "handshake", Peer: p.rank, Err: err}
		}
		if q.slot != uint32(cfg.SlotSize) || q.depth != uint32(cfg.RecvDepth) {
			return &transport.PeerError{Op: "handshake", Peer: p.rank, Err: fmt.Errorf(
				"%w: slot size %d and receive depth %d, want %d and %d", transport.ErrProtocol, q.slot, q.depth, cfg.SlotSize, cfg.RecvDepth)}
		}
		if err := p.connect(&q, pi); err != nil {
			return &transport.PeerError{Op: "connect", Peer: p.rank, Err: err}
		}
	}
	if err := cfg.KV.Set(ctx, readyKey(cfg.Rank), []byte{1}); err != nil {
		return fmt.Errorf("publish ready: %w", err)
	}
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		if _, err := cfg.KV.Get(ctx, readyKey(p.rank)); err != nil {
			return &transport.PeerError{Op: "exchange", Peer: p.rank, Err: fmt.Errorf("waiting for it to be ready: %w", err)}
		}
	}
	return nil
}

// connect walks the queue pair INIT -> RTR -> RTS towards q.
func (p *peer) connect(q *qpInfo, local PortInfo) error {
	cfg := p.e.cfg
	useGID := local.LID == 0 || q.lid == 0
	rtr := RTRAttr{
		Port: local.Num, RemoteLID: q.lid, RemoteGID: q.gid, UseGID: useGID, GIDIndex: cfg.GIDIndex,
		RemoteQPN: q.qpn, RemotePSN: q.psn, MTU: min(local.MTU, q.mtu), MinRNRTime: 12, MaxRdAtom: 1,
	}
	if err := p.qp.ReadyToReceive(rtr); err != nil {
		return fmt.Errorf("modify QP to RTR: %w", err)
	}
	rts := RTSAttr{PSN: p.psn, Timeout: cfg.Timeout, RetryCnt: cfg.RetryCount, RNRRetry: cfg.RNRRetry, MaxRdAtom: 1}
	if err := p.qp.ReadyToSend(rts); err != nil {
		return fmt.Errorf("modify QP to RTS: %w", err)
	}
	return nil
}
