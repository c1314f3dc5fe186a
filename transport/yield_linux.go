package transport

import "golang.org/x/sys/unix"

// OSYield gives this thread's core to another runnable thread of the
// machine (sched_yield), where runtime.Gosched gives the processor only
// to another goroutine of this process.
func OSYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
