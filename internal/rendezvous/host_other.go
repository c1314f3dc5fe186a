//go:build !linux

package rendezvous

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/transport"
)

var errNoShm = fmt.Errorf("transport/shm is Linux only: %w", errors.ErrUnsupported)

// hostIdentity fails: without transport/shm every rank is a host of its
// own.
func hostIdentity() (string, error) { return "", errNoShm }

func connectShm(ctx context.Context, c shmConfig) (transport.Endpoint, error) { return nil, errNoShm }

func shmRoom(n int) error { return errNoShm }
