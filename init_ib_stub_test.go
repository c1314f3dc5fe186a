//go:build !ibverbs

package goccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/goccl/goccl/transport/ib"
)

// TestInitIBNotBuilt: without the ibverbs tag, GOCCL_TRANSPORT=ib fails
// at Init with ErrInvalid and ib.ErrNotBuilt and says how to build, before
// the store is dialled.
func TestInitIBNotBuilt(t *testing.T) {
	err := initIBAlone(t)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, ib.ErrNotBuilt) || !strings.Contains(err.Error(), "-tags ibverbs") {
		t.Fatalf("Init over ib without verbs: %v, want ErrInvalid and ib.ErrNotBuilt saying -tags ibverbs", err)
	}
}
