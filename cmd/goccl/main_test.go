package main

import (
	"bytes"
	"context"
	"io"
	"runtime/debug"
	"strings"
	"testing"
)

// Every command's -h prints a usage line and exits 0, and `goccl help
// CMD` prints the same on stdout.
func TestEveryCommandHelp(t *testing.T) {
	ctx := context.Background()
	direct := map[string]func(stdout, stderr io.Writer) int{
		// run and store write to os.Stdout/os.Stderr from dispatch; their
		// testable forms are what dispatch calls.
		"run":     func(stdout, stderr io.Writer) int { return runCommand(ctx, []string{"-h"}, stdout, stderr, nil) },
		"store":   func(_, stderr io.Writer) int { return storeCommand(ctx, []string{"-h"}, stderr, nil) },
		"bench":   func(stdout, stderr io.Writer) int { return dispatch(ctx, []string{"bench", "-h"}, stdout, stderr) },
		"limits":  func(stdout, stderr io.Writer) int { return dispatch(ctx, []string{"limits", "-h"}, stdout, stderr) },
		"version": func(stdout, stderr io.Writer) int { return dispatch(ctx, []string{"version", "-h"}, stdout, stderr) },
		"trace":   func(stdout, stderr io.Writer) int { return dispatch(ctx, []string{"trace", "-h"}, stdout, stderr) },
	}
	for cmd, h := range direct {
		var out, errb bytes.Buffer
		if code := h(&out, &errb); code != 0 {
			t.Errorf("goccl %s -h: exit %d, want 0", cmd, code)
		}
		if got := out.String() + errb.String(); !strings.HasPrefix(got, "usage: goccl "+cmd) {
			t.Errorf("goccl %s -h: output does not start with a usage line:\n%s", cmd, got)
		}
		out.Reset()
		errb.Reset()
		if code := dispatch(ctx, []string{"help", cmd}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "usage: goccl "+cmd) {
			t.Errorf("goccl help %s: exit %d, stdout:\n%s\nstderr:\n%s", cmd, code, out.String(), errb.String())
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"help", "-h"}} {
		var out, errb bytes.Buffer
		if code := dispatch(ctx, args, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "usage: goccl <command>") {
			t.Errorf("goccl %v: exit %d: %s", args, code, out.String()+errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := dispatch(ctx, []string{"help", "nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Errorf("goccl help nope: exit %d: %s", code, errb.String())
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "goccl github.com/goccl/goccl ") {
		t.Errorf("goccl version: exit %d: %q %q", code, out.String(), errb.String())
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/goccl/goccl", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "5898cfb0123456789"},
			{Key: "vcs.time", Value: "2026-11-23T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := versionLine(bi)
	for _, want := range []string{"github.com/goccl/goccl v0.4.0", "git revision 5898cfb0123456789 (2026-11-23T10:00:00Z, modified)", "go1.26.8"} {
		if !strings.Contains(got, want) {
			t.Errorf("versionLine = %q, want it to contain %q", got, want)
		}
	}
	bi.Settings = nil
	if got := versionLine(bi); !strings.Contains(got, "revision unknown") {
		t.Errorf("versionLine without VCS settings = %q", got)
	}
}
