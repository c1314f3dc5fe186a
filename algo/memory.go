package algo

import "github.com/goccl/goccl/internal/scratch"

// An algorithm touches the bytes of its buffers only through its Peers:
// it sends them, receives into them and reduces them, and it takes its
// scratch space and makes its rare local copies through the two helpers
// below. That is what lets the same algorithm run on memory Go code cannot
// read, such as a GPU's: the root package hands the algorithm a stand-in
// for the device buffer and a Peers that moves the real bytes (see the
// root package's devpath.go).

// Scratcher is a Peers that provides the scratch buffers its algorithms
// receive into, so that scratch lives where the data lives.
type Scratcher interface {
	// GetScratch returns a buffer of n bytes with arbitrary contents.
	GetScratch(n int) []byte
	// PutScratch returns a buffer from GetScratch once nothing can still
	// write into it.
	PutScratch(b []byte)
}

// Copier is a Peers whose buffers Go code must not copy directly.
type Copier interface {
	// Copy copies src to dst (equal lengths) and returns when it is done.
	Copy(dst, src []byte) error
}

// GetScratch returns n bytes of scratch space for an algorithm running on
// p: p's own (Scratcher) or pooled host memory.
func GetScratch(p Peers, n int) []byte {
	if s, ok := p.(Scratcher); ok {
		return s.GetScratch(n)
	}
	return scratch.Get(n)
}

// PutScratch returns b, from GetScratch(p, ...), for reuse. Call it only
// when nothing can still write into b: after an error, drop b instead.
func PutScratch(p Peers, b []byte) {
	if s, ok := p.(Scratcher); ok {
		s.PutScratch(b)
		return
	}
	scratch.Put(b)
}

// Copy copies src into dst (equal lengths) through p when p is a Copier,
// with the built-in copy otherwise.
func Copy(p Peers, dst, src []byte) error {
	if c, ok := p.(Copier); ok {
		return c.Copy(dst, src)
	}
	copy(dst, src)
	return nil
}
