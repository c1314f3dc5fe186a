package goccl

import (
	"testing"

	"github.com/goccl/goccl/reduceop"
)

// Every dtype and op has its host reducer made once: a dtype past the
// table would fall back to a closure allocated on every call.
func TestHostReducersCoverEveryDType(t *testing.T) {
	for _, dt := range reduceop.DTypes {
		for _, op := range reduceop.Ops {
			if int(dt) >= len(hostReducers) || int(op) >= len(hostReducers[dt]) || hostReducers[dt][op] == nil {
				t.Errorf("no host reducer for %v %v", dt, op)
			}
		}
	}
}
