package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pfExiting is PF_EXITING, the kernel's flag for a task in do_exit
// (include/linux/sched.h), in the flags field of /proc/PID/stat.
const pfExiting = 0x4

// dying reports whether our child pid has exited or is exiting, without
// reaping it (the goroutine blocked in its Wait does that).
//
// "Exiting" matters: a rank killed by a signal closes its sockets in the
// middle of its exit, and its peers can see that, exit and be reaped
// before it has finished exiting: on a 2-core machine
// TestRunBlamesKilledRank caught a killed rank still running its exit
// (state R, PF_EXITING) when a survivor's exit arrived. A rank whose death
// made another fail is therefore always dying when that one's exit
// arrives.
//
// /proc/PID/stat says zombie (Z), dead (X) or PF_EXITING; waitid with
// WNOWAIT covers a child reaped in the meantime (ECHILD), whose pid may
// since name another process.
func dying(pid int) bool {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// pid (comm) state ppid pgrp session tty_nr tpgid flags ...
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 6 {
				if f[0] == "Z" || f[0] == "X" || f[0] == "x" {
					return true
				}
				if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfExiting != 0 {
					return true
				}
			}
		}
	}
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch {
		case err == nil:
			// With WNOHANG and no child waitable the kernel writes a
			// zero si_signo; a waitable one gives SIGCHLD.
			return info.Signo == int32(unix.SIGCHLD)
		case errors.Is(err, unix.ECHILD):
			return true // reaped already
		case !errors.Is(err, unix.EINTR):
			return false
		}
	}
}
