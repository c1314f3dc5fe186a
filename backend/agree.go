package backend

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// Agree tells every rank of ep whether all of them have ok, over goccl's
// links: the ranks send theirs to rank 0, which answers each with the
// list of ranks that have not (empty: all have). auto uses it at Init,
// so that one rank without NCCL makes every rank use goccl's own path.
func Agree(ctx context.Context, ep transport.Endpoint, ok bool) (all bool, without []int, err error) {
	me, n := ep.Rank(), ep.Size()
	flag := func(b bool) byte {
		if b {
			return 1
		}
		return 0
	}
	if n == 1 {
		if !ok {
			without = []int{0}
		}
		return ok, without, nil
	}
	if me != 0 {
		if err := ep.Isend(0, wire.BackendAgreeTag, []byte{flag(ok)}).Wait(ctx); err != nil {
			return false, nil, fmt.Errorf("backend agreement: send to rank 0: %w", err)
		}
		ans := make([]byte, n)
		r := ep.Irecv(0, wire.BackendAgreeTag, ans)
		if err := r.Wait(ctx); err != nil {
			return false, nil, fmt.Errorf("backend agreement: answer from rank 0: %w", err)
		}
		return decodeAgree(ans)
	}
	ans := make([]byte, n)
	ans[0] = flag(ok)
	for q := 1; q < n; q++ {
		if err := ep.Irecv(q, wire.BackendAgreeTag, ans[q:q+1]).Wait(ctx); err != nil {
			return false, nil, fmt.Errorf("backend agreement: from rank %d: %w", q, err)
		}
	}
	var reqs []transport.Request
	for q := 1; q < n; q++ {
		reqs = append(reqs, ep.Isend(q, wire.BackendAgreeTag, ans))
	}
	for _, r := range reqs {
		if err := r.Wait(ctx); err != nil {
			return false, nil, fmt.Errorf("backend agreement: answer: %w", err)
		}
	}
	return decodeAgree(ans)
}

func decodeAgree(ans []byte) (bool, []int, error) {
	var without []int
	for q, b := range ans {
		if b != 1 {
			without = append(without, q)
		}
	}
	return len(without) == 0, without, nil
}

// OpenJob opens backend k's world communicator for the rank of ep, as
// Open does. For Auto, where NCCL is built, the ranks agree over ep:
// NCCL runs only if its library loaded on every rank, else each runs
// goccl's own path and info is told why, for the log. info is told too
// which backend opened, and its library, once: at Init, never for a
// group. Every rank of a job must be the same build.
func OpenJob(ctx context.Context, k Kind, ep transport.Endpoint, info func(why string)) (Comm, error) {
	c, err := Open(k, ep.Rank(), ep.Size())
	if k != Auto && k != "" {
		if err == nil && c != nil {
			info(opened(k, c))
		}
		return c, err
	}
	if _, ok := openers[NCCL]; !ok {
		return nil, nil
	}
	all, without, aerr := err == nil && c != nil, []int(nil), error(nil)
	if !inProcess(ep) {
		all, without, aerr = Agree(ctx, ep, all)
	} else if !all {
		without = seq(ep.Size()) // the ranks share this process's attempt
	}
	if all && aerr == nil {
		info(opened(k, c))
		return c, nil
	}
	if c != nil {
		c.Close()
	}
	if aerr != nil {
		return nil, aerr
	}
	why := fmt.Sprintf("auto: goccl's own path for device buffers too: the NCCL library did not load on rank(s) %v", without)
	if err != nil {
		why += "; here: " + err.Error()
	}
	info(why)
	return nil, nil
}

// inProcess reports whether every rank of ep is in this process
// (transport/mem's endpoints, whose route to every rank is "mem", as
// Comm.TransportFor shows it). Such ranks agree without a word: they
// share the process's one load of the library. Nor could they ask each
// other: NewLocal makes them one after another, and the first would wait
// for ever for the second's answer.
func inProcess(ep transport.Endpoint) bool {
	if c, ok := ep.(*transport.CountingEndpoint); ok {
		ep = c.Endpoint
	}
	v, ok := ep.(interface{ Via(peer int) string })
	return ok && v.Via((ep.Rank()+1)%ep.Size()) == "mem"
}

// opened says, for the log, which backend k opened (c): its name, and
// the library where the backend says which (a fmt.Stringer).
func opened(k Kind, c Comm) string {
	lib := ""
	if s, ok := c.(fmt.Stringer); ok {
		lib = " (" + s.String() + ")"
	}
	if c.Memory() == Device {
		return fmt.Sprintf("%s: %s%s for device buffers of the calls it takes, on every rank; goccl's own path for host buffers and the rest", k, c.Name(), lib)
	}
	return fmt.Sprintf("%s: %s%s for the calls it takes", k, c.Name(), lib)
}

// seq is 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
