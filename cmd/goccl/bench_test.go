package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Every -op, checked against the sequential reference, with an awkward
// world size and dtypes of every width: #wrong must be 0 everywhere.
func TestBenchCheckEveryOp(t *testing.T) {
	for op := range benchOps {
		for _, dt := range []string{"float32", "bfloat16", "int8", "int64"} {
			if op == "onebit" && dt != "float32" {
				continue
			}
			redop := "sum"
			if op == "allreduce" && dt == "int8" {
				redop = "bxor"
			}
			args := []string{"-transport", "mem", "-n", "3", "-op", op, "-dtype", dt, "-redop", redop,
				"-root", "2", "-b", "4", "-e", "1400", "-f", "7", "-w", "1", "-iters", "2", "-check", "-format", "json", "-q"}
			var out, errb bytes.Buffer
			if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
				t.Fatalf("%s %s: exit %d: %s", op, dt, code, errb.String())
			}
			var rows []result
			if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
				t.Fatalf("%s %s: %v", op, dt, err)
			}
			if len(rows) != 4 {
				t.Fatalf("%s %s: %d rows, want 4 (4, 28, 196, 1372 bytes, rounded down)", op, dt, len(rows))
			}
			for _, r := range rows {
				if r.Wrong != 0 {
					t.Errorf("%s %s %d bytes: %d wrong", op, dt, r.Bytes, r.Wrong)
				}
			}
		}
	}
}

func TestBenchAlgoAllAndFormats(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"-transport", "mem", "-n", "4", "-algo", "all", "-b", "1K", "-e", "4K", "-w", "0", "-iters", "1", "-check", "-q"}
	if code := benchMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, a := range []string{"ring", "tree", "halving", "doubling"} {
		if !strings.Contains(out.String(), " "+a+" ") {
			t.Errorf("table has no %s rows:\n%s", a, out.String())
		}
	}
	out.Reset()
	args = []string{"-transport", "mem", "-n", "2", "-b", "8", "-e", "8", "-w", "0", "-iters", "1", "-format", "csv", "-q"}
	if code := benchMain(context.Background(), args, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "op,ranks,") {
		t.Fatalf("csv: exit %d: %q", code, out.String())
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-op", "nope"}, {"-dtype", "float128"}, {"-redop", "avg", "-dtype", "int32"},
		{"-b", "2M", "-e", "1M"}, {"-root", "9", "-n", "2"}, {"-algo", "pairwise"}, {"-transport", "ib"},
		{"-f", "1"}, {"-units", "furlongs"},
	} {
		var out, errb bytes.Buffer
		if code := benchMain(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "1K": 1024, "64M": 64 << 20, "1G": 1 << 30, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
	if _, err := parseSize("x"); err == nil {
		t.Error("parseSize(x) succeeded")
	}
}
