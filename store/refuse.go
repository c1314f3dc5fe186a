package store

import (
	"log/slog"

	"github.com/goccl/goccl/internal/refuse"
)

// Why a server dropped a connection before it authenticated.
const (
	refusedSilent   = "silent"       // no first message within the handshake timeout
	refusedClosed   = "closed"       // the client closed before authenticating
	refusedGarbage  = "garbage"      // bytes that are not the protocol
	refusedTooLarge = "too_large"    // a frame over MaxPreAuthMessage
	refusedAuth     = "wrong_secret" // an authentication that failed
	refusedOverCap  = "over_cap"     // MaxPending connections were already waiting
)

// refusalWords is what the log says of them (internal/refuse).
var refusalWords = refuse.Words{
	Each:    "store: refused a connection before authentication",
	First:   "store: refused a connection before authentication (further refusals are summarised at most every 10s; each at debug level)",
	Summary: "store: refused connections before authentication",
	Reasons: []string{refusedSilent, refusedClosed, refusedGarbage, refusedTooLarge, refusedAuth, refusedOverCap},
}

// refusals logs the connections dropped before they authenticate.
type refusals struct{ log refuse.Log }

func (r *refusals) note(log *slog.Logger, reason, remote string, err error) {
	r.log.Note(log, &refusalWords, reason, remote, err)
}

func (r *refusals) flush(log *slog.Logger) { r.log.Flush(log, &refusalWords) }
