package mem_test

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint { return mem.New(size) })
}

func TestConformanceRendezvousOnly(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return mem.NewWithConfig(size, mem.Config{EagerLimit: -1})
	})
}
