package twolevel

import "github.com/goccl/goccl/algo"

// shares is the layout by share of a blocked buffer (reduce-scatter,
// allgather): share j holds the blocks of local rank j of every host,
// blocks j, L+j, 2L+j, ..., one after the other, and the shares follow
// each other in j's order. The phase within a host sees share j as its
// block j; the phase across hosts on local index j sees share j alone,
// its block h being block h·L+j of the buffer.
type shares struct {
	l      layout
	counts []int // the buffer's blocks, in elements
	off    []int // their byte offsets in the buffer
	shares []int // the shares, in elements
	soff   []int // their byte offsets in the scratch
	es     int
}

func newShares(p algo.Peers, l layout, counts []int) shares {
	s := shares{l: l, counts: counts, es: p.ElemSize(), shares: make([]int, l.L)}
	s.off = algo.Offsets(counts, s.es)
	for b, c := range counts {
		s.shares[b%l.L] += c
	}
	s.soff = algo.Offsets(s.shares, s.es)
	return s
}

// blocks returns the counts of share j's blocks: block h is the buffer's
// block h·L+j.
func (s shares) blocks(j int) []int {
	c := make([]int, s.l.H)
	for h := range c {
		c[h] = s.counts[h*s.l.L+j]
	}
	return c
}

// share returns share j of the scratch scr.
func (s shares) share(scr []byte, j int) []byte { return scr[s.soff[j]:s.soff[j+1]] }

// block returns the place of the buffer's block b in the scratch scr.
func (s shares) block(scr []byte, b int) []byte {
	L := s.l.L
	j := b % L
	lo := s.soff[j]
	for k := j; k < b; k += L {
		lo += s.counts[k] * s.es
	}
	return scr[lo : lo+s.counts[b]*s.es]
}

// pack copies every block of buf to its place in scr, share by share.
func (s shares) pack(p algo.Peers, scr, buf []byte) error {
	pos := 0
	for j := 0; j < s.l.L; j++ {
		for b := j; b < len(s.counts); b += s.l.L {
			k := s.off[b+1] - s.off[b]
			if err := copyBlock(p, scr[pos:pos+k], buf[s.off[b]:s.off[b+1]]); err != nil {
				return err
			}
			pos += k
		}
	}
	return nil
}

// unpack copies every block but skip from its place in scr to buf.
func (s shares) unpack(p algo.Peers, buf, scr []byte, skip int) error {
	pos := 0
	for j := 0; j < s.l.L; j++ {
		for b := j; b < len(s.counts); b += s.l.L {
			k := s.off[b+1] - s.off[b]
			if b != skip {
				if err := copyBlock(p, buf[s.off[b]:s.off[b+1]], scr[pos:pos+k]); err != nil {
					return err
				}
			}
			pos += k
		}
	}
	return nil
}
