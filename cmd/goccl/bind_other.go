//go:build !linux

package main

import "os/exec"

// allowedCPUs returns nil: binding is implemented on Linux only.
func allowedCPUs() []int { return nil }

// startBound is cmd.Start: binding is implemented on Linux only.
func startBound(cmd *exec.Cmd, _ []int) error { return cmd.Start() }
