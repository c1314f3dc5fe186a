package goccl

import "github.com/goccl/goccl/algo"

// Topology implements algo.Hosts for algo/twolevel: c.topology(), the machine its picks assume.
func (p *peers) Topology() algo.Topology { return p.c.topology() }
