//go:build !linux

package main

import (
	"context"
	"io"
)

// shmFigures are the shared-memory limits, measured on Linux only.
type shmFigures struct{ copy, rtt, swap, cma, cma2 float64 }

func (f shmFigures) rows() []limit { return nil }

func shmProcesses(context.Context, int, int) (shmFigures, error) {
	return shmFigures{}, errShmLimits
}

func shmChild(context.Context, bool, int, int, io.Writer) error { return errShmLimits }
