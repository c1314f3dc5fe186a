package goccl

import (
	"errors"
	"fmt"

	"github.com/goccl/goccl/internal/rendezvous"
	"github.com/goccl/goccl/transport/ib"
)

// testIBConfig, set by the package's own tests, adjusts the
// transport/ib configuration of job rank r before Init probes or connects
// it: tests give each rank the fake provider of transport/ib/ibfake and a
// device of its own, as if it were a host with an HCA.
var testIBConfig func(jobRank int, c *ib.Config)

// ibUsable says whether this rank can use transport/ib: verbs built in and
// a device with an active port (rendezvous.Config.IBUsable). A build
// without the ibverbs tag fails with an error wrapping ErrInvalid and
// ib.ErrNotBuilt that says how to build one; Init refuses
// GOCCL_TRANSPORT=ib with it before it sends anything.
func ibUsable(cfg *rendezvous.Config) error {
	err := cfg.IBUsable()
	if errors.Is(err, ib.ErrNotBuilt) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}
