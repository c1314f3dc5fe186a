package commslog

import "context"

// internalKey marks a context whose collectives are goccl's own.
type internalKey struct{}

// Internal returns a context that marks the collectives run under it as
// goccl's own, not the user's: the communicator checks IsInternal and does
// not record them, as DeepSpeed does not record what torch runs inside its
// calls. It is meant for the barrier that ends Init and for the straggler
// reports' allgathers (Straggler and DeepSpeedStraggler mark their own
// contexts).
func Internal(ctx context.Context) context.Context {
	if IsInternal(ctx) {
		return ctx
	}
	return context.WithValue(ctx, internalKey{}, true)
}

// IsInternal reports whether ctx, or a context it derives from, was made by
// Internal. The communicator asks only once Profiling has said yes, so a
// disabled logger costs nothing more.
func IsInternal(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	v, _ := ctx.Value(internalKey{}).(bool)
	return v
}
