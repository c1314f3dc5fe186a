package sim

// The links share their bandwidth as a fluid: the messages crossing a
// link at once each get an equal share of it, and a message moves at the
// pace of its most crowded link, bytes·β·k on a link it shares with k-1
// others. Messages from one rank to another go one after the other, as
// over one connection; messages of different pairs share. Whenever a
// message starts or ends, the messages that share a link with it are
// re-paced.

// outMsg is a message queued by its sender.
type outMsg struct {
	to    int
	bytes int
	data  []byte
	step  int
	req   *request
}

// outQ holds one ordered pair's messages that have not left the sender.
type outQ struct {
	msgs   []outMsg
	active bool // its first message is a flow on the links
}

// flow is a message moving across its links.
type flow struct {
	from  int
	q     *outQ
	m     outMsg
	links [4]int
	k     int
	alpha float64
	start float64 // when it began to move
	rem   float64 // bytes left at time last
	last  float64
	tpb   float64 // seconds per byte at the current shares
	ver   uint32  // bumped at every re-pacing; stale events carry an older one
	mark  uint64
}

// enqueue queues a send of rk's; the pair's first message starts moving.
func (s *sched) enqueue(rk *rank, m outMsg) {
	q := rk.out[m.to]
	if q == nil {
		q = &outQ{}
		rk.out[m.to] = q
	}
	q.msgs = append(q.msgs, m)
	if !q.active {
		s.startFlow(rk.id, q)
	}
}

// startFlow puts q's first message on its links.
func (s *sched) startFlow(from int, q *outQ) {
	q.active = true
	m := q.msgs[0]
	f := &flow{from: from, q: q, m: m, start: s.now, last: s.now, rem: float64(m.bytes)}
	var links [4]int
	f.k, f.alpha = s.net.path(from, m.to, &links)
	f.links = links
	if m.bytes == 0 {
		// Nothing to carry: it leaves at once.
		s.push(event{t: s.now, fl: f, ver: f.ver})
		return
	}
	affected := s.settle(f)
	for _, l := range f.links[:f.k] {
		s.net.flows[l] = append(s.net.flows[l], f)
	}
	s.repace(append(affected, f))
}

// finishFlow handles a flow whose last byte has left: its send completes,
// the message arrives α later, and the pair's next message starts.
func (s *sched) finishFlow(f *flow) {
	if f.m.bytes > 0 {
		affected := s.settle(f)
		for _, l := range f.links[:f.k] {
			fl := s.net.flows[l]
			for i, g := range fl {
				if g == f {
					copy(fl[i:], fl[i+1:])
					fl[len(fl)-1] = nil
					s.net.flows[l] = fl[:len(fl)-1]
					break
				}
			}
		}
		s.repace(affected)
	}
	arrive := s.now + f.alpha
	s.complete(f.m.req)
	if s.cfg.Record {
		s.record(Event{Kind: Send, Rank: f.from, Peer: f.m.to, Bytes: f.m.bytes, Step: f.m.step, Start: f.start, End: arrive})
	}
	s.deliver(f.from, message{bytes: f.m.bytes, data: f.m.data, step: f.m.step, start: f.start, arrive: arrive}, f.m.to)
	q := f.q
	q.msgs[0] = outMsg{}
	q.msgs = q.msgs[1:]
	q.active = false
	if len(q.msgs) > 0 {
		s.startFlow(f.from, q)
	}
}

// settle brings the remaining bytes of every flow sharing a link with f
// (f excluded) up to now at their current pace, and returns them.
func (s *sched) settle(f *flow) []*flow {
	s.markGen++
	f.mark = s.markGen
	out := s.affected[:0]
	for _, l := range f.links[:f.k] {
		for _, g := range s.net.flows[l] {
			if g.mark == s.markGen {
				continue
			}
			g.mark = s.markGen
			if g.tpb > 0 {
				g.rem = max(0, g.rem-(s.now-g.last)/g.tpb)
			}
			g.last = s.now
			out = append(out, g)
		}
	}
	s.affected = out
	return out
}

// repace sets the pace of flows from their links' current sharing and
// schedules their ends.
func (s *sched) repace(flows []*flow) {
	for _, g := range flows {
		tpb := 0.0
		for _, l := range g.links[:g.k] {
			tpb = max(tpb, s.net.beta[l]*float64(len(s.net.flows[l])))
		}
		g.tpb = tpb
		g.ver++
		s.push(event{t: s.now + g.rem*tpb, fl: g, ver: g.ver})
	}
}
