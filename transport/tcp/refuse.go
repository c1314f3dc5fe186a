package tcp

import (
	"log/slog"

	"github.com/goccl/goccl/internal/refuse"
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

// refusalWords is what the log says of them (internal/refuse).
var refusalWords = refuse.Words{
	Each:    "tcp: refused connection from a stranger",
	First:   "tcp: refused a connection that sent no valid hello (further ones are summarised at most every 10s; each at debug level)",
	Summary: "tcp: refused connections that sent no valid hello",
	Reasons: []string{refusedSilent, refusedClosed, refusedGarbage, refusedOverCap},
}

// refusals logs the connections dropped before they authenticate.
type refusals struct{ log refuse.Log }

func (r *refusals) note(log *slog.Logger, reason, remote string, err error) {
	r.log.Note(log, &refusalWords, reason, remote, err)
}

func (r *refusals) flush(log *slog.Logger) { r.log.Flush(log, &refusalWords) }
