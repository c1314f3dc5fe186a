package tcp

import (
	"log/slog"
	"sync"
	"time"
)

// Why a listener dropped a stranger: a connection that never sent a
// well-formed hello. (A refusal after a well-formed hello, such as a wrong
// secret or job, is a peer of some job misconfigured: it is logged at
// warn level each time, as before.)
const (
	refusedSilent  = "silent"   // no hello within the handshake timeout
	refusedClosed  = "closed"   // the peer closed or broke the connection first
	refusedGarbage = "garbage"  // bytes that are not a hello, or a failed TLS handshake
	refusedOverCap = "over_cap" // Config.MaxPending connections were already in their handshake
)

// summaryEvery is the least time between two warn-level summaries of
// refused strangers.
const summaryEvery = 10 * time.Second

// refusals logs the strangers a listener drops: each at debug level, and
// at warn level the first one and then a count by reason at most every
// summaryEvery, so that a port scanner, health checks or a flood of
// silent connections cannot flood the log.
type refusals struct {
	mu      sync.Mutex
	counts  map[string]int
	total   int
	since   time.Time // the last summary
	example []any     // remote and error of the latest refusal
}

func (r *refusals) note(log *slog.Logger, reason, remote string, err error) {
	attrs := []any{"reason", reason, "remote", remote}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	log.Debug("tcp: refused connection from a stranger", attrs...)
	r.mu.Lock()
	if r.counts == nil {
		r.counts = make(map[string]int)
	}
	r.counts[reason]++
	r.total++
	r.example = attrs[2:]
	if !r.since.IsZero() && time.Since(r.since) < summaryEvery {
		r.mu.Unlock()
		return
	}
	first := r.since.IsZero()
	attrs = r.summaryLocked()
	r.mu.Unlock()
	msg := "tcp: refused connections that sent no valid hello"
	if first {
		msg = "tcp: refused a connection that sent no valid hello (further ones are summarised at most every 10s; each at debug level)"
	}
	log.Warn(msg, attrs...)
}

// flush logs what was refused since the last summary, if anything.
func (r *refusals) flush(log *slog.Logger) {
	r.mu.Lock()
	if r.total == 0 {
		r.mu.Unlock()
		return
	}
	attrs := r.summaryLocked()
	r.mu.Unlock()
	log.Warn("tcp: refused connections that sent no valid hello", attrs...)
}

// summaryLocked returns the summary's attributes and starts a new period;
// r.mu is held.
func (r *refusals) summaryLocked() []any {
	attrs := []any{"count", r.total}
	if !r.since.IsZero() {
		attrs = append(attrs, "in", time.Since(r.since).Round(10*time.Millisecond).String())
	}
	for _, reason := range []string{refusedSilent, refusedClosed, refusedGarbage, refusedOverCap} {
		if n := r.counts[reason]; n > 0 {
			attrs = append(attrs, reason, n)
		}
	}
	attrs = append(attrs, slog.Group("latest", r.example...))
	clear(r.counts)
	r.total = 0
	r.since = time.Now()
	return attrs
}
