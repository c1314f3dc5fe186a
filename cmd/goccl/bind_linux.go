package main

import (
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs returns the CPUs this process may run on, in increasing
// order, or nil if the kernel will not say.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// startBound starts cmd bound to cpus (nil: unbound, as cmd.Start). A
// child inherits the CPU affinity of the thread that forks it, so the
// calling goroutine locks its thread, narrows the thread's affinity to
// cpus, starts the child and restores it. If the affinity cannot be set,
// the child starts unbound.
func startBound(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if unix.SchedGetaffinity(0, &old) != nil || unix.SchedSetaffinity(0, &set) != nil {
		runtime.UnlockOSThread()
		return cmd.Start()
	}
	err := cmd.Start()
	if unix.SchedSetaffinity(0, &old) == nil {
		runtime.UnlockOSThread()
	} // else the thread stays locked, and ends with this goroutine, rather than run narrowed
	return err
}
