package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl/algo"
)

// peer is a rank's algo.Peers. Its methods run on the rank's goroutine.
type peer struct{ r *rank }

var (
	_ algo.Peers = (*peer)(nil)
	_ algo.Hosts = (*peer)(nil)
)

func (p *peer) Rank() int     { return p.r.id }
func (p *peer) Size() int     { return p.r.s.n }
func (p *peer) ElemSize() int { return p.r.s.cfg.ElemSize }

// Topology implements algo.Hosts: the simulated machine as the
// two-level model sees it, for algo/twolevel's plans, as goccl sim's
// model sees it: n/Hosts ranks a host when the hosts hold equal blocks
// and have one NIC each behind one switch, else one rank a host (the
// two-level collectives then run one level).
func (p *peer) Topology() algo.Topology {
	s := p.r.s
	t := s.cfg.Topology
	l := 1
	if s.n%t.Hosts == 0 && t.NICs <= 1 && (t.HostsPerLeaf == 0 || t.HostsPerLeaf >= t.Hosts) {
		l = s.n / t.Hosts
	}
	return algo.Topology{RanksPerHost: l, Intra: algo.Level(t.Intra), Inter: algo.Level(t.Inter), Gamma: s.cfg.Gamma}
}

type doneReq struct{ err error }

func (q doneReq) Wait(context.Context) error { return q.err }

// Isend starts sending b to rank to; the scheduler queues it on the
// links once every rank waits.
func (p *peer) Isend(to int, b []byte) algo.Request {
	rk := p.r
	if to < 0 || to >= rk.s.n || to == rk.id {
		return doneReq{fmt.Errorf("sim: rank %d sends to rank %d of %d", rk.id, to, rk.s.n)}
	}
	q := &request{r: rk, send: true, step: rk.clock + 1}
	rk.ops = append(rk.ops, op{kind: opSend, peer: to, b: b, req: q})
	return q
}

// Irecv starts receiving the next message from rank from into b.
func (p *peer) Irecv(from int, b []byte) algo.Request {
	rk := p.r
	if from < 0 || from >= rk.s.n || from == rk.id {
		return doneReq{fmt.Errorf("sim: rank %d receives from rank %d of %d", rk.id, from, rk.s.n)}
	}
	q := &request{r: rk, recvState: &recvState{peer: from, b: b}}
	rk.ops = append(rk.ops, op{kind: opRecv, peer: from, req: q})
	return q
}

// Wait parks the rank until the scheduler has finished q.
func (q *request) Wait(ctx context.Context) error {
	rk := q.r
	if !q.done {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		rk.waitOn = q
		rk.block()
		if !q.done {
			return rk.s.abortErr()
		}
	}
	rk.clock = max(rk.clock, q.step)
	return q.err
}

// abortErr is the error of a wait that the scheduler ended early.
func (s *sched) abortErr() error {
	if errors.Is(s.aborted, ErrAborted) {
		return s.aborted
	}
	return fmt.Errorf("%w: %w", ErrAborted, s.aborted)
}

// Reduce reduces src into dst (when data is real) and charges the rank
// len(dst)·γ of virtual time.
func (p *peer) Reduce(dst, src []byte) error {
	rk := p.r
	es := rk.s.cfg.ElemSize
	if len(dst) != len(src) || len(dst)%es != 0 {
		return fmt.Errorf("sim: reduce of %d bytes into %d", len(src), len(dst))
	}
	if !rk.s.cfg.SizeOnly {
		if rk.s.cfg.Reduce == nil {
			return errors.New("sim: no reducer")
		}
		if err := rk.s.cfg.Reduce(dst, src); err != nil {
			return err
		}
	}
	return rk.charge(len(dst))
}

// charge parks the rank for the reduction of m bytes.
func (rk *rank) charge(m int) error {
	if m == 0 || rk.s.cfg.Gamma == 0 {
		return nil
	}
	rk.reduce = m
	rk.block()
	if rk.s.aborted != nil {
		return rk.s.abortErr()
	}
	return nil
}

// sizePeer is a peer of a SizeOnly run: its scratch is shared reserved
// address space, and copies and reductions touch no bytes.
type sizePeer struct{ peer }

var (
	_ algo.Scratcher = (*sizePeer)(nil)
	_ algo.Copier    = (*sizePeer)(nil)
)

func (p *sizePeer) GetScratch(n int) []byte { return p.r.s.mem.get(n) }
func (p *sizePeer) PutScratch([]byte)       {}
func (p *sizePeer) Copy(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("sim: copy of %d bytes into %d", len(src), len(dst))
	}
	return nil
}

func nowWall() float64 { return float64(time.Now().UnixNano()) / 1e9 }
