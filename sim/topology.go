package sim

import (
	"fmt"
	"math"
)

// Level is the alpha-beta pair of one level of the network.
type Level struct {
	Alpha float64 // seconds of latency per message
	Beta  float64 // seconds per byte: the inverse of a link's bandwidth
}

// Topology says where the ranks live and how they are connected.
//
// Ranks are spread over Hosts hosts in contiguous blocks (rank r lives on
// host r·Hosts/n, so blocks differ in size by at most one). Within a host
// every rank has its own send port and receive port at the Intra level
// (NVLink through a switch). Between hosts a message leaves through one of
// its host's NICs and enters through one of the destination host's, each
// a link of the Inter level; a rank uses NIC (local index mod NICs). With
// HostsPerLeaf > 0 the hosts hang off leaf switches of that many hosts, and
// a message between leaves also crosses its leaf's uplink and the other
// leaf's downlink, each carrying HostsPerLeaf·NICs NICs' worth of
// bandwidth divided by Oversubscription.
//
// Every link carries its bandwidth in each direction, shared equally by
// the messages crossing it at once; a message moves at the pace of its
// most crowded link (see flow.go). Messages from one rank to another go
// one after the other, as over one connection. A message has been sent
// when its last byte has left and arrives α later. The zero Topology is
// invalid; see [Flat] and [DefaultTopology].
type Topology struct {
	Hosts        int   // number of hosts, 1..ranks
	Intra, Inter Level // within a host, between hosts
	// NICs is the number of NICs per host; zero means one.
	NICs int
	// HostsPerLeaf is the number of hosts per leaf switch of a two-level
	// fat tree; zero means one switch joins every host at full bandwidth.
	HostsPerLeaf int
	// Oversubscription divides the uplinks' bandwidth; zero means 1.
	Oversubscription float64
}

// The default machine constants: a 100 Gbit/s network with 5 µs latency
// between hosts, NVLink-class links (1 µs, 200 GB/s each way) within a
// host, and reductions at 500 GB/s (an accelerator's memory bandwidth).
const (
	DefaultInterAlpha = 5e-6
	DefaultInterBeta  = 8 / 100e9
	DefaultIntraAlpha = 1e-6
	DefaultIntraBeta  = 1 / 200e9
	DefaultGamma      = 1 / 500e9
)

// DefaultTopology is ranks ranks on hosts hosts with the default constants.
func DefaultTopology(hosts int) Topology {
	return Topology{
		Hosts: hosts,
		Intra: Level{Alpha: DefaultIntraAlpha, Beta: DefaultIntraBeta},
		Inter: Level{Alpha: DefaultInterAlpha, Beta: DefaultInterBeta},
	}
}

// Flat is the topology of the plain alpha-beta model: every rank alone on
// its host, one NIC each, one switch, so that a message between any two
// ranks costs α + m·β and ranks contend only for their own NIC.
func Flat(ranks int, l Level) Topology {
	return Topology{Hosts: ranks, Intra: l, Inter: l}
}

// validate checks t for a group of n ranks.
func (t Topology) validate(n int) error {
	if t.Hosts < 1 || t.Hosts > n {
		return fmt.Errorf("%d hosts for %d ranks", t.Hosts, n)
	}
	for _, v := range []float64{t.Intra.Alpha, t.Intra.Beta, t.Inter.Alpha, t.Inter.Beta} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("alpha and beta must be finite and not negative, got %g", v)
		}
	}
	if t.NICs < 0 || t.HostsPerLeaf < 0 || t.Oversubscription < 0 {
		return fmt.Errorf("negative NICs, HostsPerLeaf or Oversubscription")
	}
	return nil
}

// network is the links of a topology for n ranks and their queues.
type network struct {
	t              Topology
	n              int
	nics, perLeaf  int
	host           []int32   // by rank
	nic            []int32   // by rank: its NIC's index within the host
	flows          [][]*flow // by link: the messages crossing it now
	beta           []float64 // by link
	rankTx, rankRx int       // first link ids
	nicTx, nicRx   int
	leafUp, leafDn int
}

func newNetwork(t Topology, n int) *network {
	nw := &network{t: t, n: n, nics: max(1, t.NICs), perLeaf: t.HostsPerLeaf}
	if nw.perLeaf == 0 || nw.perLeaf >= t.Hosts {
		nw.perLeaf = 0
	}
	nw.host = make([]int32, n)
	nw.nic = make([]int32, n)
	for r := 0; r < n; r++ {
		h := int64(r) * int64(t.Hosts) / int64(n)
		first := (h*int64(n) + int64(t.Hosts) - 1) / int64(t.Hosts) // host h's first rank
		nw.host[r] = int32(h)
		nw.nic[r] = int32((int64(r) - first) % int64(nw.nics))
	}
	hn := t.Hosts * nw.nics
	leaves := 0
	if nw.perLeaf > 0 {
		leaves = (t.Hosts + nw.perLeaf - 1) / nw.perLeaf
	}
	nw.rankTx, nw.rankRx = 0, n
	nw.nicTx, nw.nicRx = 2*n, 2*n+hn
	nw.leafUp, nw.leafDn = 2*n+2*hn, 2*n+2*hn+leaves
	total := 2*n + 2*hn + 2*leaves
	nw.flows = make([][]*flow, total)
	nw.beta = make([]float64, total)
	for i := 0; i < 2*n; i++ {
		nw.beta[i] = t.Intra.Beta
	}
	for i := 2 * n; i < 2*n+2*hn; i++ {
		nw.beta[i] = t.Inter.Beta
	}
	over := t.Oversubscription
	if over == 0 {
		over = 1
	}
	for i := 2*n + 2*hn; i < total; i++ {
		nw.beta[i] = t.Inter.Beta * over / float64(nw.perLeaf*nw.nics)
	}
	return nw
}

// path returns the links a message from rank a to rank b crosses and the
// latency it pays.
func (nw *network) path(a, b int, links *[4]int) (k int, alpha float64) {
	ha, hb := int(nw.host[a]), int(nw.host[b])
	if ha == hb {
		links[0], links[1] = nw.rankTx+a, nw.rankRx+b
		return 2, nw.t.Intra.Alpha
	}
	links[0] = nw.nicTx + ha*nw.nics + int(nw.nic[a])
	links[1] = nw.nicRx + hb*nw.nics + int(nw.nic[b])
	k = 2
	if nw.perLeaf > 0 {
		la, lb := ha/nw.perLeaf, hb/nw.perLeaf
		if la != lb {
			links[2], links[3] = nw.leafUp+la, nw.leafDn+lb
			k = 4
		}
	}
	return k, nw.t.Inter.Alpha
}
