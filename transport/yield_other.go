//go:build !linux

package transport

import "runtime"

// OSYield gives the processor to another goroutine (sched_yield is
// Linux's; elsewhere the scheduler's yield is the nearest).
func OSYield() { runtime.Gosched() }
